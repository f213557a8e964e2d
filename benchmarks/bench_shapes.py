"""Cluster shapes without public data: the default synopsis call against DP peers.

Every bank comes from a generator at a fixed seed (or a fixed real data set) with a
public box; the synopsis is the default call ``brace.private_synopsis(X, epsilon=ε,
delta=1e-5, bounds=box, seed=s)`` — no public data, no k. Its rows are labelled by the
synopsis's clusters (``Synopsis.cluster``: the released merge of its attractors,
``docs/privacy-accounting.md`` §15.2); ``synopsis_nearest`` labels them by the nearest
attractor (the synopsis before the merge); ``synopsis_k`` is ``cluster(X, k=true k)``
(post-processing to k, k given); the default call chooses its setting by a public rule
(``project="choose"``: a private subspace for d > 32 where it affords more cells);
``synopsis_full`` and ``synopsis_project`` are the same call with ``project=None`` (the
full space) and ``project="auto"`` (a private subspace first, §15.1; clusters). The
default rows read one synopsis per bank, ε and seed (their fit time is the first row's).

Shapes (:data:`SHAPES`; ``n`` rows, ``d`` dimensions, ``k`` clusters):

* ``aniso``: 15 Gaussian clusters in d = 16, each with its own random rotation and axes
  (standard deviations) geometric from 0.4 to 0.04 (condition number 100), centres
  uniform in ``[-1.5, 1.5]^16`` at least 1.2 apart, n = 20,000, box ``[-3, 3]^16``;
* ``manifold``: 30 blobs on a curved 5-dim manifold in d = 256: latent centres uniform
  in ``[0, 1]^5``, latent spread 0.03, the map ``u ↦ sin(Wu + b)/√(256/8)``
  (``W`` Gaussian of std 3), ambient noise 0.01, n = 50,000, box ``[-1, 1]^256``;
* ``zipf``: 20 round Gaussian clusters (std 0.08) in d = 32, sizes Zipf with largest /
  smallest = 30, centres uniform in ``[-0.8, 0.8]^32``, n = 50,000, box ``[-1, 1]^32``;
* ``background``: 25 round clusters (std 0.06) in d = 64 and 10 % of the rows uniform in
  the box ``[-1, 1]^64``, n = 30,000; scored on the clustered rows only;
* ``digits``: scikit-learn's digits (1,797 rows, box ``[0, 16]^64``); ``mnist``: the
  MNIST test split (10,000 rows, /255, box ``[0, 1]^784``);
* ``round``: ``brace.datasets.sample_clusters(100_000, 64, 100)`` (the round banks).

Peers (``benchmarks/bench_peers_nopublic.py``'s): diffprivlib ``KMeans`` (ε-DP, k given),
the LSH tree (DP, k given), DP-GRAMS from box starts (DP, k used for the number of
starts), and k-means on a 1 % public sample of the same population (NOT DP: public data,
k given; for digits and MNIST a 1 % sample of the bank's rows). ARI against the labels,
mean ± sd over seeds.

Usage::

    python benchmarks/bench_shapes.py [--quick] [--shapes aniso zipf ...] [--eps 1 4]
        [--seeds 3] [--methods synopsis diffprivlib ...] [--json out.json]
        [--figure docs/figures/shapes.png]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

DELTA = 1e-5
SEEDS_DEFAULT = 3


# ------------------------------------------------------------------------- generators


def _ortho(g: np.random.Generator, d: int) -> np.ndarray:
    q, r = np.linalg.qr(g.standard_normal((d, d)))
    return q * np.sign(np.diag(r))


def _centres(g: np.random.Generator, k: int, d: int, half: float, sep: float) -> np.ndarray:
    out: list[np.ndarray] = []
    while len(out) < k:
        c = g.uniform(-half, half, d)
        if all(np.linalg.norm(c - o) >= sep for o in out):
            out.append(c)
    return np.array(out)


def gen_aniso(n: int, g: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    d, k = 16, 15
    C = _centres(g, k, d, 1.5, 1.2)
    axes = np.geomspace(0.4, 0.04, d)
    y = np.arange(n) % k
    X = np.empty((n, d))
    for j in range(k):
        rows = np.flatnonzero(y == j)
        Q = _ortho(g, d)
        X[rows] = C[j] + (g.standard_normal((rows.size, d)) * axes) @ Q.T
    return X, y


def gen_manifold(n: int, g: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    d, k, m = 256, 30, 5
    W = 3.0 * np.random.default_rng(7).standard_normal((d, m))  # the manifold: fixed
    b = np.random.default_rng(8).uniform(0, 2 * np.pi, d)
    U = _centres(g, k, m, 0.5, 0.2) + 0.5
    y = np.arange(n) % k
    u = U[y] + 0.03 * g.standard_normal((n, m))
    X = np.sin(u @ W.T + b) / math.sqrt(d / 8) + 0.01 * g.standard_normal((n, d))
    return X, y


def gen_zipf(n: int, g: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    d, k = 32, 20
    C = _centres(g, k, d, 0.8, 0.6)
    w = np.arange(1, k + 1) ** -(math.log(30) / math.log(k))
    y = g.choice(k, size=n, p=w / w.sum())
    return C[y] + 0.08 * g.standard_normal((n, d)), y


def gen_background(n: int, g: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    d, k = 64, 25
    C = _centres(g, k, d, 0.7, 0.6)
    y = np.arange(n) % k
    X = C[y] + 0.06 * g.standard_normal((n, d))
    bg = g.random(n) < 0.10
    X[bg] = g.uniform(-1, 1, (int(bg.sum()), d))
    y = np.where(bg, -1, y)
    return X, y


def gen_round(n: int, g: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    from brace.datasets import sample_clusters

    return sample_clusters(n, 64, 100, seed=g)


#: name -> (generator or None, n, quick n, box half-width or (lo, hi), k)
SHAPES: dict[str, tuple[Any, int, int, Any, int]] = {
    "aniso": (gen_aniso, 20_000, 10_000, 3.0, 15),
    "manifold": (gen_manifold, 50_000, 15_000, 1.0, 30),
    "zipf": (gen_zipf, 50_000, 15_000, 1.0, 20),
    "background": (gen_background, 30_000, 15_000, 1.0, 25),
    "digits": (None, 1797, 1797, (0.0, 16.0), 10),
    "mnist": (None, 10_000, 3000, (0.0, 1.0), 10),
    "round": (gen_round, 100_000, 20_000, 1.0, 100),
}


def load(shape: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                  float, float, int]:
    """``(X, labels, public, lo, hi, k)``: the bank, its labels (−1: background), a 1 %
    public sample of the same population, the public box and the number of clusters."""
    fn, _, _, box, k = SHAPES[shape]
    lo, hi = (-box, box) if np.isscalar(box) else box
    if fn is not None:
        g = np.random.default_rng([seed, 38])
        m = max(k, n // 100)
        Z, yz = fn(n + m, g)  # one population: m rows drawn at random are the public sample
        perm = g.permutation(n + m)
        X, y, P = Z[perm[:n]], np.asarray(yz)[perm[:n]], Z[perm[n:]]
        return np.clip(X, lo, hi), y, np.clip(P, lo, hi), lo, hi, k
    if shape == "digits":
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
        X = X.astype(np.float64)
    else:
        from brace.experiments.mnist_data import load_mnist_test

        os.environ.setdefault("BRACE_MNIST_DIR", "/work/shared/data/mnist")
        im, y = load_mnist_test(None)
        X = im.reshape(im.shape[0], -1).astype(np.float64)[:n] / 255.0
        y = y[:n]
    g = np.random.default_rng([seed, 3838])
    P = X[g.choice(X.shape[0], max(k, X.shape[0] // 100), replace=False)]
    return X, np.asarray(y, dtype=np.int64), P, lo, hi, k


# ------------------------------------------------------------------------- methods


def _nearest(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    from scipy.spatial import cKDTree

    return cKDTree(C).query(X)[1]


_SYN: dict[tuple, Any] = {}  # one synopsis per bank, ε, seed and setting, read thrice


def m_synopsis(X, P, lo, hi, k, eps, seed, how="clusters", project="choose"):
    import brace

    key = (id(X), X.shape, eps, seed, project)
    if key not in _SYN:
        _SYN.clear()
        _SYN[key] = brace.private_synopsis(X, epsilon=eps, delta=DELTA, bounds=(lo, hi),
                                           seed=seed, project=project)
    syn = _SYN[key]
    if how == "nearest" or not hasattr(syn, "cluster"):
        return syn.assign(X), syn.n_attractors
    lab = syn.cluster(X, k=k if how == "k" else None)
    return lab, int(np.unique(lab).size)


def m_lsh(X, P, lo, hi, k, eps, seed):
    import peers_lsh

    d = X.shape[1]
    c = np.full(d, 0.5 * (lo + hi))
    R = 0.5 * (hi - lo) * math.sqrt(d)
    C = peers_lsh.lsh_tree_clustering(X, k, epsilon=eps, delta=DELTA, radius=R, centre=c,
                                      seed=seed)
    return _nearest(X, C), C.shape[0]


def m_diffprivlib(X, P, lo, hi, k, eps, seed):
    import peers_dp

    d = X.shape[1]
    C = peers_dp.diffprivlib_kmeans(X, k, epsilon=eps, bounds=(np.full(d, lo),
                                                              np.full(d, hi)), seed=seed)
    return _nearest(X, C), C.shape[0]


def m_grams(X, P, lo, hi, k, eps, seed):
    import peers_dp

    d = X.shape[1]
    R = 0.5 * (hi - lo) * math.sqrt(d)
    C = peers_dp.dp_grams(X, epsilon=eps, delta=DELTA, bandwidth=0.1 * R, n_inits=10 * k,
                          init="box", bounds=(np.full(d, lo), np.full(d, hi)), seed=seed,
                          init_seed=10_000 + seed)
    return _nearest(X, C), C.shape[0]


def m_public_kmeans(X, P, lo, hi, k, eps, seed):
    from sklearn.cluster import KMeans

    C = KMeans(min(k, P.shape[0]), n_init=3, random_state=seed).fit(P).cluster_centers_
    return _nearest(X, C), C.shape[0]


#: name -> (fn, label, kind); kinds: DP, NOT DP, and whether k is given
METHODS: dict[str, tuple[Any, str, str]] = {
    "synopsis": (m_synopsis, "synopsis, default call (clusters)", "DP, no k"),
    "synopsis_nearest": (lambda *a: m_synopsis(*a, how="nearest"),
                         "synopsis, nearest attractor (no merge)", "DP, no k"),
    "synopsis_k": (lambda *a: m_synopsis(*a, how="k"), "synopsis, cluster(k=true k)",
                   "DP, k given"),
    "synopsis_full": (lambda *a: m_synopsis(*a, project=None),
                      "synopsis, full space (project=None; clusters)", "DP, no k"),
    "synopsis_project": (lambda *a: m_synopsis(*a, project="auto"),
                         "synopsis, private subspace (project='auto'; clusters)",
                         "DP, no k"),
    "diffprivlib": (m_diffprivlib, "diffprivlib KMeans (δ = 0)", "DP, k given"),
    "lsh_tree": (m_lsh, "LSH-tree clustering", "DP, k given"),
    "dp_grams": (m_grams, "DP-GRAMS, box starts", "DP, k → 10k starts"),
    "public_kmeans": (m_public_kmeans, "k-means on a 1 % public sample",
                      "NOT DP (public data), k given"),
}
EPS_FREE = ("public_kmeans",)


def ari(y: np.ndarray, lab: np.ndarray) -> float:
    from sklearn.metrics import adjusted_rand_score

    keep = y >= 0  # background rows (−1) are not scored
    return float(adjusted_rand_score(y[keep], lab[keep]))


def run(shapes, methods, eps_list, seeds, quick, log) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for shape in shapes:
        n = SHAPES[shape][2 if quick else 1]
        res: dict[str, dict[str, list]] = {}
        for s in range(seeds):
            X, y, P, lo, hi, k = load(shape, n, s)
            for m in methods:
                fn = METHODS[m][0]
                for eps in (eps_list[:1] if m in EPS_FREE else eps_list):
                    t0 = time.perf_counter()
                    lab, kk = fn(X, P, lo, hi, k, eps, s)
                    key = m if m in EPS_FREE else f"{m}@{eps:g}"
                    r = res.setdefault(key, {"ari": [], "k": [], "s": []})
                    r["ari"].append(ari(y, lab))
                    r["k"].append(kk)
                    r["s"].append(time.perf_counter() - t0)
            log(f"{shape} seed {s} done")
        out[shape] = {"n": n, "d": int(X.shape[1]), "k": k, "results": res}
    return out


def table(out: dict[str, Any], methods, eps_list) -> str:
    lines = []
    for shape, r in out.items():
        lines.append(f"\n{shape} (n = {r['n']}, d = {r['d']}, k = {r['k']}): ARI mean ± sd "
                     f"[clusters found]\n")
        lines.append("| method | kind | " + " | ".join(f"ε = {e:g}" for e in eps_list) + " |")
        lines.append("|---|---|" + "---|" * len(eps_list))
        for m in methods:
            label, kind = METHODS[m][1], METHODS[m][2]
            cells = []
            for e in eps_list:
                v = r["results"].get(m if m in EPS_FREE else f"{m}@{e:g}")
                if v is None:
                    cells.append("—")
                    continue
                a = np.array(v["ari"])
                sd = f" ± {a.std(ddof=1):.3f}" if a.size > 1 else ""
                cells.append(f"{a.mean():.3f}{sd} [{np.mean(v['k']):.0f}]")
            lines.append(f"| {label} | {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def figure(out: dict[str, Any], methods, eps_list, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = [s for s in SHAPES if s in out]
    cols = 4
    rows = (len(shapes) + cols) // cols  # one panel more for the legend
    fig, axs = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.9 * rows), sharey=True)
    axs = np.atleast_1d(axs).ravel()
    for ax, shape in zip(axs, shapes, strict=False):
        for i, m in enumerate(methods):  # one colour per method in every panel
            if m in EPS_FREE:
                v = out[shape]["results"].get(m)
                if v:
                    ax.axhline(np.mean(v["ari"]), ls=":", c="k", label=METHODS[m][1])
                continue
            have = [e for e in eps_list if f"{m}@{e:g}" in out[shape]["results"]]
            ys = [np.mean(out[shape]["results"][f"{m}@{e:g}"]["ari"]) for e in have]
            if ys:  # the ε this method was run at (runs merged from several files)
                ax.plot(have, ys, marker="o", label=METHODS[m][1],
                        c=f"C{i % 10}", lw=2.5 if m == "synopsis" else 1)
        ax.set_xscale("log")
        ax.set_xticks(eps_list, [f"{e:g}" for e in eps_list])
        ax.minorticks_off()
        ax.set_title(f"{shape} (d = {out[shape]['d']})", fontsize=9)
        ax.set_xlabel("ε (δ = 1e-5)", fontsize=8)
        ax.set_ylim(-0.05, 1.05)
    for ax in axs[::cols]:
        ax.set_ylabel("ARI")
    handles, labels = axs[0].get_legend_handles_labels()
    for ax in axs[len(shapes):]:
        ax.axis("off")
    axs[-1].legend(handles, labels, fontsize=7, loc="center")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller n, 1 seed")
    p.add_argument("--shapes", nargs="*", default=list(SHAPES))
    p.add_argument("--eps", nargs="*", type=float, default=None,
                   help="total ε (default 1 4; with --merge: every ε the files hold)")
    p.add_argument("--seeds", type=int, default=None)
    p.add_argument("--methods", nargs="*", default=list(METHODS))
    p.add_argument("--json", default=None)
    p.add_argument("--figure", default=None, help="ARI against ε per shape (from --json "
                   "files given with --merge, or this run)")
    p.add_argument("--merge", nargs="*", default=None, help="JSON files to merge (no run)")
    a = p.parse_args(argv)
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", file=sys.stderr, flush=True)

    if a.merge:
        out: dict[str, Any] = {}
        seen: set[float] = set()
        for f in a.merge:  # later files replace the rows they hold
            with open(f) as fh:
                data = json.load(fh)
                seen.update(data.get("eps", []))
                for shape, r in data["results"].items():
                    if shape in out:
                        out[shape]["results"].update(r["results"])
                    else:
                        out[shape] = r
        a.eps = a.eps or sorted(seen) or [1.0, 4.0]
    else:
        a.eps = a.eps or [1.0, 4.0]
        import peers_dp

        why = peers_dp.diffprivlib_unavailable() if "diffprivlib" in a.methods else None
        if why is not None:
            a.methods = [m for m in a.methods if m != "diffprivlib"]
            log(f"note: {why}: diffprivlib skipped")
        seeds = a.seeds or (1 if a.quick else SEEDS_DEFAULT)
        out = run(a.shapes, a.methods, a.eps, seeds, a.quick, log)
    print(table(out, a.methods, a.eps))
    print(f"\nwall {time.perf_counter() - t0:.0f} s")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"results": out, "eps": a.eps, "quick": a.quick}, fh)
    if a.figure:
        figure(out, a.methods, a.eps, a.figure)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
