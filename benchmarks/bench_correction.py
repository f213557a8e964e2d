"""Where does BRACE's boundary correction pay? Correcting κ against non-correcting κ = ∞.

For each cell (a bank, its queries, ε, T) the benchmark makes ``--runs`` seeded releases
per method with :func:`brace.private_retrieve` (method ``"brace"``, δ = 1e-5, the
library's valid certificate) and reports, against the noiseless trajectory ``z``:

* the mean final error ``‖Y_T − z_T‖²/d`` with its standard error;
* the wrong-mode fraction: the noiseless retrieval run on for ``ATTRACTOR_STEPS`` more
  steps from ``Y_T`` and from ``z_T`` ends more than ``r/2`` apart (a different memory
  retrieved, or none);
* the ratio of mean errors against κ = ∞ with the default release (``release="auto"``),
  and the paired difference in units of its standard error (``z``; all methods of a cell
  share the seed, hence the Gaussian innovations, so the difference is paired).

Methods: κ ∈ {0, 0.01, 1} (the correction can fire; ``release="auto"`` then always picks
the smooth release) and κ = ∞ with ``release="auto"`` (the default: the count release
or the smooth one) and with ``release="smooth"`` (same family as the correcting rows).

Banks (``r`` the radius; queries seeded):

* ``sparse``: ``n`` rows of ``N(0, I_d)`` with a radius at which a gate holds a few
  memories (n = 2000 at d = 2: a few tens); queries = a random memory +
  ``N(0, (r/(2√d))² I)`` (an offset of norm about ``r/2``).
* ``empty``: tight clusters (``m`` rows each, jitter ``0.01r``) on a square lattice of
  spacing ``4r`` in the first two coordinates; each query lies ``1.5r`` from a cluster
  centre, so its gate is empty and the noiseless trajectory stays at ``q``.
* ``pair``: two tight clusters (``m`` rows each, jitter ``0.002r``) whose centres are
  ``1.1r`` apart; the query sits ``0.1r`` from the first one, away from the second, and
  the noise may bring the second into the released gate.

    python benchmarks/bench_correction.py [--quick] [--runs N] [--threads 1] [--json PATH]
    python benchmarks/bench_correction.py --banks sparse --eps 32 --steps 5

The result is discussed in ``docs/experiments.md`` §4 ("Where correction wins").
"""

from __future__ import annotations

import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _bench  # noqa: E402
from _bench import threads_info  # noqa: E402

if __name__ == "__main__":
    _bench.limit_threads(sys.argv[1:])

import numpy as np  # noqa: E402

from brace import LSRMemory, certificate, private_retrieve  # noqa: E402

DELTA = 1e-5
ATTRACTOR_STEPS = 30
# (label, kappa, release)
METHODS = (
    ("k=0", 0.0, None),
    ("k=0.01", 0.01, None),
    ("k=1", 1.0, None),
    ("k=inf auto", math.inf, None),
    ("k=inf smooth", math.inf, "smooth"),
)
BASELINE = "k=inf auto"

# name -> list of bank specs
BANKS = {
    "sparse": [dict(kind="sparse", d=2, n=200, r=0.3), dict(kind="sparse", d=2, n=500, r=0.3),
               dict(kind="sparse", d=2, n=2000, r=0.3), dict(kind="sparse", d=8, n=200, r=2.0),
               dict(kind="sparse", d=8, n=2000, r=2.0), dict(kind="sparse", d=32, n=2000, r=6.0)],
    "empty": [dict(kind="empty", d=2, m=50, r=1.0), dict(kind="empty", d=8, m=50, r=1.0)],
    "pair": [dict(kind="pair", d=2, m=200, r=1.0)],
}


def describe(spec: dict) -> str:
    if spec["kind"] == "sparse":
        return f"sparse N(0,I) n={spec['n']} r={spec['r']:g}"
    if spec["kind"] == "empty":
        return f"empty gate, 25 clusters x {spec['m']}"
    return f"pair, 2 clusters x {spec['m']}, gap 0.1r"


def make_cell(spec: dict, runs: int, seed: int) -> tuple[np.ndarray, float, np.ndarray]:
    """``(bank, radius, queries)`` of one bank spec (seeded by ``seed`` and the spec)."""
    d, r = spec["d"], spec["r"]
    # one seed per (seed, spec); len(kind) is a distinct integer per kind
    key = [seed, d, spec.get("n", 0), spec.get("m", 0), len(spec["kind"])]
    rng = np.random.default_rng(key)
    if spec["kind"] == "sparse":
        X = rng.standard_normal((spec["n"], d))
        noise = 0.5 * r / math.sqrt(d) * rng.standard_normal((runs, d))  # norm ≈ r/2
        q = X[rng.integers(0, spec["n"], runs)] + noise
        return X, r, q
    m = spec["m"]
    if spec["kind"] == "empty":
        grid = np.array([(i, j) for i in range(-2, 3) for j in range(-2, 3)], float) * 4 * r
        centres = np.zeros((len(grid), d))
        centres[:, :2] = grid
        X = np.repeat(centres, m, axis=0) + 0.01 * r * rng.standard_normal((len(grid) * m, d))
        phi = rng.uniform(0, 2 * np.pi, runs)
        q = np.zeros((runs, d))
        q[:, 0], q[:, 1] = 1.5 * r * np.cos(phi), 1.5 * r * np.sin(phi)
        return X, r, q + centres[rng.integers(0, len(grid), runs)]
    centres = np.zeros((2, d))
    centres[1, 0] = 1.1 * r
    X = np.repeat(centres, m, axis=0) + 0.002 * r * rng.standard_normal((2 * m, d))
    q = np.zeros((runs, d))
    q[:, 0] = -0.1 * r
    return X, r, q


def run_cell(spec: dict, eps: float, T: int, runs: int, seed: int) -> dict:
    X, r, q = make_cell(spec, runs, seed)
    d = X.shape[1]
    mem = LSRMemory(X, radius=r)
    clean = mem.retrieve(q, T)
    zT = clean[:, -1]
    z_lim = mem.retrieve(zT, ATTRACTOR_STEPS)[:, -1]
    rows, errs = {}, {}
    for label, kappa, release in METHODS:
        res = private_retrieve(mem, q, method="brace", epsilon=eps, delta=DELTA, steps=T,
                               kappa=kappa, release=release, seed=seed)
        err = ((res.final - zT) ** 2).sum(axis=1) / d
        y_lim = mem.retrieve(res.final, ATTRACTOR_STEPS)[:, -1]
        wrong = np.linalg.norm(y_lim - z_lim, axis=1) > r / 2
        errs[label] = err
        rows[label] = dict(
            kappa=None if not math.isfinite(kappa) else kappa,
            release=res.params["release"], gamma=res.params["gamma"],
            mean_error=float(err.mean()), se_error=float(err.std(ddof=1) / math.sqrt(runs)),
            wrong_mode=float(wrong.mean()),
            se_wrong=float(math.sqrt(max(wrong.mean() * (1 - wrong.mean()), 0) / runs)),
            mean_noise_std=[float(v) for v in res.noise_std.mean(axis=0)],
            activation_rate=float(res.activated.mean()),
        )
    base = errs[BASELINE]
    for label, row in rows.items():
        diff = errs[label] - base
        sd = diff.std(ddof=1) / math.sqrt(runs)
        row["ratio_vs_inf_auto"] = row["mean_error"] / rows[BASELINE]["mean_error"]
        row["z_vs_inf_auto"] = float(diff.mean() / sd) if sd > 0 else 0.0
        diff_s = errs[label] - errs["k=inf smooth"]
        sd_s = diff_s.std(ddof=1) / math.sqrt(runs)
        row["z_vs_inf_smooth"] = float(diff_s.mean() / sd_s) if sd_s > 0 else 0.0
    m_q = mem.gate_pass(q).counts
    g0 = rows["k=0"]["gamma"]
    scale = {k: certificate(mem, q, clean[:, :T], steps=T, kappa=k, gamma=g0).noise_scale
             for k in (0.0, math.inf)}
    cert_ratio = [float(v) for v in np.median(scale[0.0] / scale[math.inf], axis=0)]
    return dict(bank=describe(spec), spec=spec, d=d, n=X.shape[0], radius=r, epsilon=eps,
                steps=T, runs=runs, median_gate_at_q=float(np.median(m_q)),
                empty_gate_at_q=float(np.mean(m_q == 0)), cert_ratio_k0=cert_ratio,
                methods=rows)


def print_cell(c: dict) -> None:
    head = (f"{c['bank']}, d={c['d']}, n={c['n']}, eps={c['epsilon']:g}, T={c['steps']} "
            f"(median gate at q {c['median_gate_at_q']:g}, empty {c['empty_gate_at_q']:.2f}; "
            f"Dbar k=0 / k=inf by step "
            f"{' '.join(f'{v:.2g}' for v in c['cert_ratio_k0'])})")
    print(head)
    for label, m in c["methods"].items():
        print(f"  {label:<13} {m['release']:<6} {m['mean_error']:>10.4g} ± "
              f"{m['se_error']:<9.2g} wrong {m['wrong_mode']:.3f} ± {m['se_wrong']:.3f}  "
              f"ratio {m['ratio_vs_inf_auto']:>7.3f}  z {m['z_vs_inf_auto']:>7.1f}")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    p = _bench.parser(__doc__, quick="small smoke run (seconds)")
    p.add_argument("--runs", type=int, default=None, help="releases per cell (default 300)")
    p.add_argument("--banks", nargs="+", choices=sorted(BANKS), default=None)
    p.add_argument("--eps", type=float, nargs="+", default=None,
                   help="epsilons (default 8 32 128)")
    p.add_argument("--steps", type=int, nargs="+", default=None, help="horizons (default 3 5)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.runs is not None and a.runs < 2:
        p.error(f"--runs must be at least 2 (a standard error needs two runs); got {a.runs}.")
    runs = a.runs or (40 if a.quick else 300)
    banks = a.banks or (["sparse", "pair"] if a.quick else sorted(BANKS))
    eps_list = a.eps or ([32.0] if a.quick else [8.0, 32.0, 128.0])
    steps = a.steps or ([3] if a.quick else [3, 5])
    specs = [s for b in banks for s in BANKS[b]]
    if a.quick:
        specs = specs[:1] + specs[-1:]
    print(f"BRACE correction vs kappa = inf: delta = {DELTA:g}, {runs} runs per cell, "
          f"seed {a.seed}, threads: {threads_info()}")
    print("  method        release   mean final error ± se   wrong-mode ± se   "
          "ratio vs k=inf auto, paired z")
    cells = []
    t0 = time.perf_counter()
    for spec in specs:
        for eps in eps_list:
            for T in steps:
                c = run_cell(spec, eps, T, runs, a.seed)
                print_cell(c)
                cells.append(c)
    wall = time.perf_counter() - t0
    wins = [(c["bank"], c["d"], c["epsilon"], c["steps"], lab)
            for c in cells for lab, m in c["methods"].items()
            if lab != BASELINE and m["kappa"] is not None and m["z_vs_inf_auto"] < -3
            and m["z_vs_inf_smooth"] < -3]
    print(f"\n{len(wins)} (cell, kappa) pairs where correcting BRACE beats both kappa = inf "
          f"rows by more than 3 paired standard errors; wall {wall:.1f} s")
    _bench.save_json(a.json, {"benchmark": "bench_correction", "delta": DELTA, "runs": runs,
                              "seed": a.seed, "attractor_steps": ATTRACTOR_STEPS,
                              **_bench.environment(), "wall_s": wall, "cells": cells})
    return 0


if __name__ == "__main__":
    sys.exit(main())
