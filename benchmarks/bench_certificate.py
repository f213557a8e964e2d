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

With ``--lower-bound``, also a floor under **every** valid certificate at step 2
(n = 256): any noise scale ``S`` with ``S ≥ LS`` and ``S(D') ≤ e^γ S(D)`` has
``S(D) ≥ e^{-γk} LS(B)`` for every bank ``B`` at distance ``k`` from ``D``
(``docs/privacy.md`` §1). The bank ``B_k`` moves ``k`` far rows just inside the
boundary of the gate at ``z_1(D)``, on the side away from ``q`` (outside the gate at
``q``, so ``z_1`` is unchanged); its neighbour moves the gate-at-``q`` row furthest
along ``z_1 − q`` to the opposite boundary, which shifts ``z_1`` back and pushes the
``k`` rows out of the step-2 gate. The floor is ``max_k e^{-γk} ‖Q_2(B_k) − Q_2(B_k')‖``.

    python benchmarks/bench_certificate.py [--quick] [--queries Q] [--json PATH]
    python benchmarks/bench_certificate.py --lower-bound [--queries Q]
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


def lower_bound_step2(X, q, gamma, kmax=30):
    """``(floor, k)``: ``max_k e^{-γk} ‖Q_2(B_k) − Q_2(B_k')‖`` (see the module docstring)."""
    mem = LSRMemory(X, radius=R)
    z = mem.retrieve(q, 2)
    c1, hist = z[1], z[None, :2]
    v = c1 - q
    if not np.linalg.norm(v) > 0:
        return 0.0, 0
    u = v / np.linalg.norm(v)
    inq = np.flatnonzero(np.linalg.norm(X - q, axis=1) <= R)
    far = np.flatnonzero(np.linalg.norm(X - c1, axis=1) > 2 * R + 1e-9)
    j = inq[np.argmax((X[inq] - q) @ u)]
    best = (0.0, 0)
    for eps in (1e-6, 1e-4, 1e-3):
        for k in range(min(kmax, len(far)) + 1):
            B = X.copy()
            B[far[:k]] = c1 + R * (1 - eps) * u
            Bp = B.copy()
            Bp[j] = q - R * (1 - 1e-9) * u
            pre = [certificate(LSRMemory(b, radius=R), q[None], hist, steps=2, kappa=0.0,
                               gamma=gamma).pre_noise[0, 1] for b in (B, Bp)]
            best = max(best, (float(np.exp(-gamma * k) * np.linalg.norm(pre[0] - pre[1])), k))
    return best


def floor_table(n_queries, seed, gamma):
    X = sample_mixture(256, spec=PAPER_MIXTURE, seed=seed)
    rng = np.random.default_rng(seed + 1)
    qs = X[rng.integers(0, 256, n_queries)] + rng.normal(0, 0.35, (n_queries, 2))
    mem = LSRMemory(X, radius=R)
    rows = []
    for q in qs:
        hist = mem.retrieve(q, 2)[None, :2]
        d0 = certificate(mem, q[None], hist, steps=2, kappa=0.0, gamma=gamma).noise_scale[0, 1]
        di = certificate(mem, q[None], hist, steps=2, kappa=np.inf,
                         gamma=gamma).noise_scale[0, 1]
        fl, k = lower_bound_step2(X, q, gamma)
        rows.append({"dbar_kappa0": float(d0), "dbar_kappa_inf": float(di), "floor": fl,
                     "k": k})
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--queries", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--lower-bound", action="store_true",
                   help="the step-2 floor under every valid certificate (n = 256)")
    a = p.parse_args(argv)
    if a.lower_bound:
        gamma = choose_gamma(EPS, DELTA, T, dim=2)
        rows = floor_table(a.queries or 20, a.seed, gamma)
        med = {key: float(np.median([r[key] for r in rows]))
               for key in ("dbar_kappa0", "dbar_kappa_inf", "floor")}
        print(f"n = 256, step 2, gamma = {gamma:.4f}, {len(rows)} queries (medians): "
              f"Dbar(kappa=0) {med['dbar_kappa0']:.4f}, floor under every valid "
              f"certificate {med['floor']:.4f}, Dbar(kappa=inf) {med['dbar_kappa_inf']:.4f}; "
              f"median Dbar(kappa=0)/floor "
              f"{np.median([r['dbar_kappa0'] / r['floor'] for r in rows]):.2f}, "
              f"floor/Dbar(kappa=inf) "
              f"{np.median([r['floor'] / r['dbar_kappa_inf'] for r in rows]):.2f}")
        if a.json:
            write_json(a.json, {"gamma": gamma, "rows": rows})
        return 0
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
