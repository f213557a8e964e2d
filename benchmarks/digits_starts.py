"""What limits the synopsis on digits at (1, 10⁻⁵): a simulation of its Voronoi rounds
from different starting centres (``docs/benchmarks.md``, "Digits at ε = 1").

NOT the library's mechanism and NOT a private release: the rows are projected on the
*exact* top-9 principal subspace of scikit-learn's digits (the default call's private
subspace has 9 directions here), and each round adds Gaussian noise to the exact clipped
Voronoi statistic with the library's sensitivity (a replaced row moves a clipped offset
of norm ≤ c and a count of weight c between two cells: L2 ``2c``) at the zCDP the
default call gives its rounds: ``ρ`` at (1, 10⁻⁵) (:func:`calibrate_one_shot`) times the
subspace synopsis's share (``1 − CENTRE − SCALE − MOMENTS`` shares) times the rounds'
share (``1 − CENTRE − RADII − PAIRS``). A round's post-processing is the library's
(:func:`brace.synopsis.next_centres`: the count threshold, James–Stein shrinkage, the
clipped step, merges within half the scale). The clip of each round is the median
distance of the rows to their nearest centre (exact here; released in the library).

Starts, each followed by the rounds (ARI of the rows' nearest final centre against the
classes, mean over seeds):

* ``class means``: the ten exact class means (an oracle), one round at the whole budget;
* ``public``: ``k₀ = 25`` centres at half the scale from the mean in public random
  directions, as the synopsis starts, three rounds (``--clean``: without noise);
* ``hist2d``: a noisy 16 × 16 histogram of the first two coordinates (30 % of the
  rounds' budget; a row is in one bin: L2 sensitivity √2), weighted k-means (k = 10 or
  16) of the bins above 1 σ, two rounds with the rest;
* ``plane grid``: the 3 × 3 grid ``(a·√λ₁, b·√λ₂, 0, …)``, ``a, b ∈ {−1, 0, 1}``, on the
  top two principal directions (``λ`` their exact variances; the library would use the
  released ones), three rounds;
* ``forgy``: non-private k-means from 13 random rows, three exact Lloyd iterations;
* ``points``: a noisy count of the rows nearest each of 400 public points drawn from
  ``N(0, diag λ)`` (a Voronoi histogram in the whole subspace; 30 % of the rounds'
  budget, a row is in one cell: L2 sensitivity √2), weighted k-means (k = 13) of the
  points above 2 σ, two rounds with the rest;
* ``ceiling``: the public starts with the *whole* budget ``ρ`` on the rounds and the
  exact subspace for free (not achievable: the subspace and the scales cost budget),
  three and five rounds: what the rounds from public starts reach at best here.

Usage: ``python benchmarks/digits_starts.py [--seeds 20]`` (about 3 s).
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from scipy.spatial import cKDTree
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits
from sklearn.decomposition import PCA
from sklearn.metrics import adjusted_rand_score

from brace.accounting.calibration import calibrate_one_shot
from brace.projection import MOMENTS_SHARE, SCALE_SHARE
from brace.seeding import CENTRE_SHARE, PAIRS_SHARE, RADII_SHARE, merge_weighted
from brace.synopsis import default_min_count, next_centres


def noisy_round(Y, C, clip, rho, g, clean=False):
    """One simulated Voronoi round and the library's post-processing of it."""
    j = cKDTree(C).query(Y)[1]
    off = Y - C[j]
    norm = np.linalg.norm(off, axis=1, keepdims=True)
    off *= np.minimum(1.0, clip / np.maximum(norm, 1e-300))
    k, d = C.shape
    S = np.zeros((k, d))
    np.add.at(S, j, off)
    m = np.bincount(j, minlength=k).astype(np.float64)
    sigma = 2.0 * clip / math.sqrt(2.0 * rho)
    if not clean:
        S += sigma * g.standard_normal(S.shape)
        m += sigma / clip * g.standard_normal(k)
    released = np.concatenate([S, clip * m[:, None]], axis=1)
    thr = default_min_count(sigma / clip, k) if not clean else 1.0
    return next_centres(C, released, clip, 0.0, thr, 0.0 if clean else sigma)


def rounds(Y, C, R, rho, g, clean=False):
    for _ in range(R):
        clip = float(np.median(cKDTree(C).query(Y)[0]))
        C, m = noisy_round(Y, C, clip, rho / R, g, clean)
        scale = float(np.median(cKDTree(C).query(Y)[0]))
        C, _ = merge_weighted(C, m, 0.5 * scale)  # as the synopsis: within half the scale
    return C


def hist2d_starts(Y, k, rho, g, clean=False, G=16):
    s0 = float(np.median(np.linalg.norm(Y, axis=1)))
    edges = np.linspace(-s0, s0, G + 1)
    idx = np.clip(np.searchsorted(edges, Y[:, :2], side="right") - 1, 0, G - 1)
    H = np.zeros((G, G))
    np.add.at(H, (idx[:, 0], idx[:, 1]), 1.0)
    sigma = math.sqrt(2.0) / math.sqrt(2.0 * rho)
    if not clean:
        H += sigma * g.standard_normal(H.shape)
    mid = 0.5 * (edges[:-1] + edges[1:])
    P = np.stack(np.meshgrid(mid, mid, indexing="ij"), -1).reshape(-1, 2)
    w = H.reshape(-1)
    keep = w > (sigma if not clean else 0.0)
    km = KMeans(min(k, int(keep.sum())), n_init=4, random_state=0).fit(
        P[keep], sample_weight=w[keep])
    C = np.zeros((km.cluster_centers_.shape[0], Y.shape[1]))
    C[:, :2] = km.cluster_centers_  # the other coordinates at the mean (0)
    return C


def points_starts(Y, lam, k, rho, g, K=400):
    P = g.standard_normal((K, Y.shape[1])) * np.sqrt(lam)
    h = np.bincount(cKDTree(P).query(Y)[1], minlength=K).astype(np.float64)
    sigma = math.sqrt(2.0) / math.sqrt(2.0 * rho)
    h += sigma * g.standard_normal(K)
    keep = h > 2.0 * sigma
    return KMeans(min(k, int(keep.sum())), n_init=4, random_state=0).fit(
        P[keep], sample_weight=h[keep]).cluster_centers_


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    a = ap.parse_args(argv)
    X, y = load_digits(return_X_y=True)
    Y = PCA(9).fit_transform(X.astype(np.float64))
    rho = calibrate_one_shot(1.0, 1e-5)[0]
    rho_r = (rho * (1 - CENTRE_SHARE - SCALE_SHARE - MOMENTS_SHARE)
             * (1 - CENTRE_SHARE - RADII_SHARE - PAIRS_SHARE))
    print(f"digits, exact top-9 subspace; rounds' zCDP {rho_r:.5f} of {rho:.5f} at "
          f"(1, 1e-5); seeds 0-{a.seeds - 1}")
    means = np.array([Y[y == c].mean(0) for c in range(10)])
    s0 = float(np.median(np.linalg.norm(Y, axis=1)))
    sd = np.sqrt(np.var(Y[:, :2], axis=0))
    t = np.array([-1.0, 0.0, 1.0])
    plane = np.zeros((9, Y.shape[1]))
    plane[:, 0], plane[:, 1] = np.repeat(t, 3) * sd[0], np.tile(t, 3) * sd[1]
    ari = lambda C: adjusted_rand_score(y, cKDTree(C).query(Y)[1])  # noqa: E731
    arms = {
        "class means (oracle), 1 round": lambda g: rounds(Y, means, 1, rho_r, g),
        "public starts, 3 rounds": lambda g: rounds(Y, public(g), 3, rho_r, g),
        "public starts, 3 rounds, no noise": lambda g: rounds(Y, public(g), 3, rho_r, g,
                                                              clean=True),
        "hist2d k=10, 2 rounds": lambda g: rounds(Y, hist2d_starts(Y, 10, 0.3 * rho_r, g),
                                                  2, 0.7 * rho_r, g),
        "hist2d k=16, 2 rounds": lambda g: rounds(Y, hist2d_starts(Y, 16, 0.3 * rho_r, g),
                                                  2, 0.7 * rho_r, g),
        "hist2d k=10, 2 rounds, no noise": lambda g: rounds(
            Y, hist2d_starts(Y, 10, 0.3 * rho_r, g, clean=True), 2, 0.7 * rho_r, g,
            clean=True),
        "plane grid (9 starts), 3 rounds": lambda g: rounds(Y, plane, 3, rho_r, g),
        "forgy k=13, 3 exact iterations (not DP)": lambda g: KMeans(
            13, init=Y[g.choice(len(Y), 13, replace=False)], n_init=1, max_iter=3,
            tol=0.0).fit(Y).cluster_centers_,
        "400 public points' counts, k=13, 2 rounds": lambda g: rounds(
            Y, points_starts(Y, np.var(Y, axis=0), 13, 0.3 * rho_r, g), 2, 0.7 * rho_r, g),
        "ceiling: public, whole rho on 3 rounds": lambda g: rounds(Y, public(g), 3, rho, g),
        "ceiling: public, whole rho on 5 rounds": lambda g: rounds(Y, public(g), 5, rho, g),
    }

    def public(g):
        v = np.random.default_rng([int(g.integers(1 << 30)), 1]).standard_normal((25, 9))
        return 0.5 * s0 * v / np.linalg.norm(v, axis=1, keepdims=True)

    for name, fn in arms.items():
        r = [ari(fn(np.random.default_rng([s, 38]))) for s in range(a.seeds)]
        print(f"  {name:42s} ARI {np.mean(r):.3f} ± {np.std(r):.3f}", flush=True)


if __name__ == "__main__":
    main()
