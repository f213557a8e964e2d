"""How loose is BRACE's certificate at κ = 0? ``Δ̄_t`` against an adversarial search.

2-D banks from the paper's three-component mixture (``brace.datasets.PAPER_MIXTURE``),
``r = 0.8``, ``T = 5``, γ of the data-independent rule at (ε, δ) = (128, 1e-5). For each
of ``--queries`` queries (a random memory plus N(0, 0.35² I), as in the synthetic
experiment) the history is the clean trajectory (``Y_{t-1} = z_{t-1}``) and:

* ``Δ̄_t(D)`` from :func:`brace.certificate` at κ = 0;
* a lower bound on the local sensitivity ``LS_t(D) = max_{D'} ‖Q_t(D) − Q_t(D')‖`` at
  the same history: the best of the candidate replacements below, each evaluated with
  :func:`brace.certificate` on ``D'``.

Candidates, around ``q`` and every clean state ``z_1..z_{T-1}``: the ``--edge`` members
nearest the gate boundary moved just outside it and to the antipodal point, the nearest
non-members moved just inside, the most central member moved onto the boundary along
and against the trajectory's direction, and ``--random`` uniform points of
``B̄(q, 2r)`` replacing random rows. The table reports, per n and step ``t ≥ 2``, the
median over queries of ``Δ̄_t / LS_t`` (the looseness; ``LS_t`` is a lower bound, so
this over-states it by at most the search's shortfall).

    python benchmarks/bench_certificate.py [--quick] [--queries Q] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from brace import LSRMemory, certificate
from brace._io import write_json
from brace.accounting import choose_gamma
from brace.datasets import PAPER_MIXTURE, sample_mixture

R, T, EPS, DELTA = 0.8, 5, 128.0, 1e-5


def _unit(v, rng):
    n = np.linalg.norm(v)
    if n > 0:
        return v / n
    u = rng.normal(size=v.shape)
    return u / np.linalg.norm(u)


def candidates(X, q, clean, rng, edge=4, n_random=16):
    """``(row, value)`` replacements (see the module docstring)."""
    out = []
    for s in range(T):
        c = clean[s]
        dist = np.linalg.norm(X - c, axis=1)
        inside = np.flatnonzero(dist <= R)
        outside = np.flatnonzero(dist > R)
        step = clean[min(s + 1, T)] - c
        if inside.size:
            by = inside[np.argsort(dist[inside])]
            for i in by[-edge:]:
                u = _unit(X[i] - c, rng)
                out += [(i, c + R * (1 + 1e-9) * u), (i, c - R * (1 - 1e-9) * u)]
            u = _unit(step, rng)
            out += [(by[0], c + R * (1 - 1e-9) * u), (by[0], c - R * (1 - 1e-9) * u)]
        if outside.size:
            for j in outside[np.argsort(dist[outside])][:edge]:
                out.append((j, c + R * (1 - 1e-9) * _unit(X[j] - c, rng)))
    for _ in range(n_random):
        u = rng.normal(size=2)
        out.append((int(rng.integers(len(X))),
                    q + 2 * R * np.sqrt(rng.uniform()) * u / np.linalg.norm(u)))
    return out


def looseness(n, n_queries, seed, gamma, edge, n_random):
    X = sample_mixture(n, spec=PAPER_MIXTURE, seed=seed)
    rng = np.random.default_rng(seed + 1)
    qs = X[rng.integers(0, n, n_queries)] + rng.normal(0, 0.35, (n_queries, 2))
    mem = LSRMemory(X, radius=R)
    ratios = np.full((n_queries, T), np.nan)
    g0 = np.full((n_queries, T), np.nan)
    for i, q in enumerate(qs):
        clean = mem.retrieve(q, T)
        hist = clean[None, :T]
        cD = certificate(mem, q[None], hist, steps=T, kappa=0.0, gamma=gamma)
        g0[i] = [G[0, 0] for G in cD.G]
        ls = np.zeros(T)
        for row, val in candidates(X, q, clean, rng, edge, n_random):
            Xp = X.copy()
            Xp[row] = val
            cP = certificate(LSRMemory(Xp, radius=R), q[None], hist, steps=T, kappa=0.0,
                             gamma=gamma)
            ls = np.maximum(ls, np.linalg.norm(cP.pre_noise[0] - cD.pre_noise[0], axis=-1))
        ratios[i] = cD.noise_scale[0] / np.maximum(ls, 1e-300)
    return ratios, g0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--queries", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="PATH")
    a = p.parse_args(argv)
    ns = (40, 256) if a.quick else (40, 256, 2048)
    nq = a.queries or (4 if a.quick else 20)
    edge, n_random = (2, 4) if a.quick else (4, 16)
    gamma = choose_gamma(EPS, DELTA, T, dim=2)
    print(f"kappa = 0, r = {R}, T = {T}, gamma = {gamma:.4f}, {nq} queries per n; "
          "median of Dbar_t / (adversarial LS_t) per step")
    print(f"{'n':>6} " + " ".join(f"{'t=' + str(t):>8}" for t in range(1, T + 1))
          + f" {'t>=2':>8} {'s':>6}   growth of G_t(0), t = 2..T")
    rows = []
    for n in ns:
        t0 = time.perf_counter()
        ratios, g0 = looseness(n, nq, a.seed, gamma, edge, n_random)
        growth = np.median(g0[:, 1:] / g0[:, :-1], axis=0)
        med = np.nanmedian(ratios, axis=0)
        med2 = float(np.nanmedian(ratios[:, 1:]))
        dt = time.perf_counter() - t0
        print(f"{n:>6} " + " ".join(f"{m:>8.2f}" for m in med) + f" {med2:>8.2f} {dt:>6.1f}   "
              + " ".join(f"{x:.2f}" for x in growth))
        rows.append({"n": n, "median_per_step": med.tolist(), "median_steps_ge_2": med2,
                     "median_growth_G0": growth.tolist(),
                     "ratios": ratios.tolist(), "seconds": dt})
    if a.json:
        write_json(a.json, {"gamma": gamma, "queries": nq, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
