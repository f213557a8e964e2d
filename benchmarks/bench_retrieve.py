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

import os
import sys
import time
import tracemalloc
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _bench  # noqa: E402
from _bench import (  # noqa: E402,F401 (make_bank … are this module's names for its peers)
    choose_radius,
    make_bank,
    make_queries,
    threads_info,
)
from _bench import limit_threads as _apply_thread_limit  # noqa: E402,F401

if __name__ == "__main__":
    _bench.limit_threads(sys.argv[1:])

import numpy as np  # noqa: E402

from brace.memory import LSRMemory  # noqa: E402


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
    # the first call is cold: it validates and snapshots the bank
    cold = _bench.timed(lambda: mem.retrieve(queries, T), warmup=0).wall[0]
    times = _bench.timed(lambda: mem.retrieve(queries, T), repeats, warmup=0).wall
    best = min(times)

    tracemalloc.start()
    tracemalloc.reset_peak()
    base_mem = tracemalloc.get_traced_memory()[0]
    traj = mem.retrieve(queries, T)
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


def main(argv: list[str] | None = None) -> int:
    p = _bench.parser(__doc__, quick="tiny smoke run (seconds)")
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
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"threads: {threads_info()}"
    )
    rows = []
    for n in ns:
        for d in ds:
            rows.append(bench_config(n, d, Q, T, rep, a.frac, a.seed, budget))
            print(f"  done n={n} d={d}: {rows[-1]['time_s']:.4f} s", file=sys.stderr, flush=True)
    print_table(rows)
    settings = {"Q": Q, "T": T, "repeats": rep, "frac": a.frac, "seed": a.seed,
                "baseline_budget_s": budget, "quick": a.quick}
    _bench.save_json(a.json, {"benchmark": "bench_retrieve", "settings": settings,
                              **_bench.environment(), "results": rows})
    return 0 if all(row["agrees_with_loop"] for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
