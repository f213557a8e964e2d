"""Benchmark noiseless LSR retrieval (``docs/spec.md`` §1):
``LSRMemory.retrieve`` vs a per-query loop.

For every (n, d) configuration:

* bank: ``n`` points from a seeded Gaussian mixture (16 components, centres ~ N(0, 4² I),
  unit within-component spread); queries: ``Q`` random bank rows plus N(0, 0.5² I) noise;
* radius: ``r`` = median, over the queries, of the distance to the ``k``-th nearest bank
  point with ``k = ceil(frac · n)`` (``--frac``, default 1 %), so a typical gate at the
  query holds about ``frac`` of the bank (the measured median gate sizes are printed);
* batched: ``LSRMemory(bank, radius=r).retrieve(queries, T)`` on a memory whose bank is
  already validated (the one-off validation + snapshot is reported separately as "cold");
  wall time is the best of ``--repeats`` runs, peak memory is the tracemalloc peak of one
  call (numpy allocations are traced), and the effective bandwidth is
  ``T · n · d · 8 bytes / time`` (each step reads the bank once);
* baseline: for each query and step,
  ``mask = ((X - y)**2).sum(1) <= r*r; y = X[mask].mean(0) if mask.any() else y``.
  It runs query by query until ``--baseline-budget`` seconds are spent; if it stops early
  its time is scaled to all ``Q`` queries (marked ``*`` in the table). Its trajectories
  are checked against the batched ones.

Usage::

    python benchmarks/bench_retrieve.py            # full: n ∈ {1e3,1e4,1e5}, d ∈ {2,64}
    python benchmarks/bench_retrieve.py --quick    # tiny smoke run
    python benchmarks/bench_retrieve.py --json results.json --threads 1
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
import tracemalloc
from typing import Any

_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _apply_thread_limit(argv: list[str]) -> None:
    """``--threads N`` must act before numpy (and its BLAS) is imported."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--threads", type=int, default=None)
    ns, _ = pre.parse_known_args(argv)
    if ns.threads is not None and ns.threads >= 1:
        for var in _THREAD_VARS:
            os.environ[var] = str(ns.threads)


if __name__ == "__main__":
    _apply_thread_limit(sys.argv[1:])

import numpy as np  # noqa: E402

from brace._io import write_json  # noqa: E402
from brace.memory import LSRMemory  # noqa: E402


def make_bank(n: int, d: int, seed: int, components: int = 16) -> np.ndarray:
    rng = np.random.default_rng([seed, n, d])
    centres = rng.normal(scale=4.0, size=(components, d))
    return centres[rng.integers(0, components, size=n)] + rng.normal(size=(n, d))


def make_queries(X: np.ndarray, Q: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, 1, X.shape[0], X.shape[1]])
    return X[rng.integers(0, X.shape[0], size=Q)] + 0.5 * rng.normal(size=(Q, X.shape[1]))


def choose_radius(X: np.ndarray, queries: np.ndarray, frac: float) -> tuple[float, int]:
    """Median over queries of the distance to the k-th nearest bank point, k = ⌈frac·n⌉."""
    n = X.shape[0]
    k = max(1, math.ceil(frac * n))
    kth = np.empty(queries.shape[0])
    for i0 in range(0, queries.shape[0], 16):  # 16 × n distances at a time
        Y = queries[i0 : i0 + 16]
        d2 = ((X[None, :, :] - Y[:, None, :]) ** 2).sum(-1) if X.shape[1] <= 8 else None
        if d2 is None:
            d2 = (Y * Y).sum(1)[:, None] + (X * X).sum(1)[None, :] - 2.0 * Y @ X.T
        kth[i0 : i0 + 16] = np.partition(d2, k - 1, axis=1)[:, k - 1]
    return float(np.sqrt(max(np.median(kth), 0.0))), k


def baseline_loop(
    X: np.ndarray, queries: np.ndarray, r: float, T: int, budget: float
) -> tuple[np.ndarray, int, float]:
    """Per-query numpy loop; stops after ``budget`` seconds. Returns (trajectories of the
    queries done, number done, seconds)."""
    r2 = r * r
    out = np.empty((queries.shape[0], T + 1, X.shape[1]))
    t0 = time.perf_counter()
    done = 0
    for i, q in enumerate(queries):
        y = q.copy()
        out[i, 0] = y
        for t in range(1, T + 1):
            mask = ((X - y) ** 2).sum(1) <= r2
            y = X[mask].mean(0) if mask.any() else y
            out[i, t] = y
        done = i + 1
        if time.perf_counter() - t0 >= budget:
            break
    return out[:done], done, time.perf_counter() - t0


def bench_config(
    n: int, d: int, Q: int, T: int, repeats: int, frac: float, seed: int, budget: float
) -> dict[str, Any]:
    X = make_bank(n, d, seed)
    queries = make_queries(X, Q, seed)
    r, k = choose_radius(X, queries, frac)

    mem = LSRMemory(X, radius=r)
    t0 = time.perf_counter()
    traj = mem.retrieve(queries, T)  # cold: validates and snapshots the bank
    cold = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        traj = mem.retrieve(queries, T)
        times.append(time.perf_counter() - t0)
    best = min(times)

    tracemalloc.start()
    tracemalloc.reset_peak()
    base_mem = tracemalloc.get_traced_memory()[0]
    mem.retrieve(queries, T)
    peak = tracemalloc.get_traced_memory()[1] - base_mem
    tracemalloc.stop()

    g0 = mem.gate(queries, counts=True)
    gT = mem.gate(traj[:, -1], counts=True)

    ref, done, loop_s = baseline_loop(X, queries, r, T, budget)
    agree = bool(np.allclose(ref, traj[:done], rtol=1e-9, atol=1e-9))
    loop_total = loop_s * Q / done
    return {
        "n": n,
        "d": d,
        "Q": Q,
        "T": T,
        "radius": r,
        "k_nearest": k,
        "median_gate_at_query": float(np.median(g0)),
        "median_gate_at_end": float(np.median(gT)),
        "empty_gates_at_query": int((g0 == 0).sum()),
        "time_s": best,
        "times_s": times,
        "cold_time_s": cold,
        "peak_mib": peak / 2**20,
        "bank_mib": X.nbytes / 2**20,
        "gbps": T * n * d * 8 / best / 1e9,
        "loop_time_s": loop_total,
        "loop_queries_timed": done,
        "loop_scaled": done < Q,
        "speedup": loop_total / best,
        "agrees_with_loop": agree,
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    head = (
        f"{'n':>7} {'d':>3} {'r':>7} {'gate q/end':>11} {'time s':>8} {'cold s':>7} "
        f"{'peak MiB':>9} {'GB/s':>6} {'loop s':>9} {'speed-up':>8} {'ok':>3}"
    )
    print(head)
    print("-" * len(head))
    for row in rows:
        gate = f"{row['median_gate_at_query']:.0f}/{row['median_gate_at_end']:.0f}"
        star = "*" if row["loop_scaled"] else " "
        loop = f"{row['loop_time_s']:.3f}{star}"
        print(
            f"{row['n']:>7} {row['d']:>3} {row['radius']:>7.3f} {gate:>11} "
            f"{row['time_s']:>8.4f} {row['cold_time_s']:>7.4f} {row['peak_mib']:>9.1f} "
            f"{row['gbps']:>6.2f} {loop:>9} {row['speedup']:>7.1f}x "
            f"{'yes' if row['agrees_with_loop'] else 'NO':>3}"
        )
    if any(row["loop_scaled"] for row in rows):
        print(
            "* loop timed on the first loop_queries_timed queries only and scaled to all Q "
            "(see JSON / list below)"
        )
        for row in rows:
            if row["loop_scaled"]:
                print(f"    n={row['n']} d={row['d']}: {row['loop_queries_timed']}/{row['Q']}")


def threads_info() -> str:
    vals = {v: os.environ.get(v) for v in _THREAD_VARS}
    set_ = {k: v for k, v in vals.items() if v is not None}
    return ", ".join(f"{k}={v}" for k, v in set_.items()) or "library default"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny smoke run (seconds)")
    p.add_argument("--n", type=int, nargs="+", help="bank sizes (default 1e3 1e4 1e5)")
    p.add_argument("--d", type=int, nargs="+", help="dimensions (default 2 64)")
    p.add_argument("--queries", type=int, default=None, help="Q (default 256)")
    p.add_argument("--steps", type=int, default=None, help="T (default 5)")
    p.add_argument("--repeats", type=int, default=None, help="best of (default 3)")
    p.add_argument("--frac", type=float, default=0.01, help="gate fraction for r")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--baseline-budget", type=float, default=None, help="seconds for the loop (default 3)"
    )
    p.add_argument("--json", metavar="PATH", help="write results as JSON (atomically)")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="BLAS/OpenMP threads (sets OPENBLAS/OMP/MKL_NUM_THREADS before numpy loads; "
        "default: leave the environment alone)",
    )
    a = p.parse_args(argv)

    if a.quick:
        ns, ds, Q, T, rep, budget = [500, 2000], [2, 16], 32, 3, 1, 0.5
    else:
        ns, ds, Q, T, rep, budget = [1000, 10_000, 100_000], [2, 64], 256, 5, 3, 3.0
    ns = a.n or ns
    ds = a.d or ds
    Q = a.queries or Q
    T = a.steps or T
    rep = a.repeats or rep
    budget = a.baseline_budget if a.baseline_budget is not None else budget
    if min(ns) < 1 or min(ds) < 1 or Q < 1 or T < 1 or rep < 1 or not 0 < a.frac <= 1:
        p.error("n, d, queries, steps, repeats must be >= 1 and 0 < frac <= 1")

    print(
        f"LSR retrieval benchmark: Q={Q}, T={T}, best of {rep}, radius = median distance to "
        f"the ceil({a.frac:g}·n)-th nearest bank point; numpy {np.__version__}, "
        f"python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"threads: {threads_info()}"
    )
    rows = []
    for n in ns:
        for d in ds:
            rows.append(bench_config(n, d, Q, T, rep, a.frac, a.seed, budget))
            print(f"  done n={n} d={d}: {rows[-1]['time_s']:.4f} s", file=sys.stderr, flush=True)
    print_table(rows)
    if a.json:
        write_json(
            a.json,
            {
                "benchmark": "bench_retrieve",
                "settings": {
                    "Q": Q,
                    "T": T,
                    "repeats": rep,
                    "frac": a.frac,
                    "seed": a.seed,
                    "baseline_budget_s": budget,
                    "quick": a.quick,
                },
                "environment": {
                    "numpy": np.__version__,
                    "python": platform.python_version(),
                    "cpus": os.cpu_count(),
                    "threads": threads_info(),
                },
                "results": rows,
            },
        )
        print(f"wrote {a.json}")
    return 0 if all(row["agrees_with_loop"] for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
