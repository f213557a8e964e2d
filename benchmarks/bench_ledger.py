"""Per-call overhead of the privacy ledger at a short and a long history (``docs/ledger.md``).

For each accounting (local, global) and each history size S (default 10 and 10,000
recorded releases), on a bank of n = 2,000 points in d = 8 (a seeded 16-component
Gaussian mixture, as ``bench_retrieve.py``) with the radius chosen so that a gate at a
query holds about 50 memories (median over 256 pilot queries: a public choice made from
the bank, fine for a benchmark):

1. **Populate.** ``PrivateMemory(..., ledger=PATH, create=True)`` creates the ledger and
   records the first ``--real`` releases itself (one query per call, T = 3). The other
   ``S − real`` rows are *real releases computed in batches*: ``private_retrieve`` on 100
   fresh queries at the same (ε, δ, T) and method, split into one row per query, each
   appended through :meth:`brace.ledger.Ledger.append` with the record of a real
   one-query release (identical for every such call), the query's own outputs and
   released counts, and its footprints from :func:`brace.footprints.footprints` — the
   rows ``PrivateMemory.retrieve`` would have written for those queries, without paying
   its per-call price 10,000 times. The call keys are fresh SHA-256 digests (no repeats).
2. **Open.** Time ``PrivateMemory(..., ledger=PATH)`` on the populated file (it verifies
   and reads every row and rebuilds the footprint index).
3. **Per-call overhead.** For ``--calls`` fresh queries (one query per call, T = 3,
   ε = 1, δ = 1e-9, same seed for both): time ``pm.retrieve`` and ``private_retrieve``
   alone on the same call (an ``LSRMemory`` of the same bank), alternately; the
   overhead of a call is the difference, and the table reports its median (and the
   medians of both times).

Target: the overhead at 10,000 recorded releases within 2x of that at 10, per accounting.

``--journal MODE …`` (e.g. ``WAL WAL+checkpoint DELETE TRUNCATE``) instead measures the
per-call overhead at a short history (S = 10, global accounting) for each SQLite journal
mode, all with ``synchronous=FULL``: ``WAL`` (the ledger's mode), ``WAL+checkpoint``
(``wal_autocheckpoint=1``: the WAL is copied into the main file after every commit, so
the main file is complete between calls) and the rollback journals ``DELETE`` and
``TRUNCATE`` (the main file is complete between calls by construction). Every connection
of the ledger is given the mode (``docs/ledger.md``, "Copying a ledger safely").

``--advice`` instead times the public questions on a 20,000-row bank (d = 8, gate ≈ 50,
budget (100, 1e-5), local accounting): ``pm.recommend(1000)`` and
``pm.affordable_epsilon(3 queries, steps=3)`` on ledgers of ``--advice-sizes`` recorded
one-query releases (default 0, 100 and 1,000; populated as above). *Cold*: a fresh
process imports brace, opens the ledger and asks once (median of ``--cold-runs``; the
import is timed apart). *Warm*, in this process: the first ask on the opened ledger,
then each asked right after a new release (the recorded spend changed) and asked again
before the next one (the same spend), over ``--rounds`` releases; medians (after a
release also in CPU time, which a loaded machine inflates less). Target: ≤ 50 ms after
a release at 1,000 releases.

The budget is (1e9, 1e-5), so nothing is refused (its filter orders are α ≈ 1.02–1.05;
the admission test's cost does not depend on the orders). δ = 1e-9 per query: the
default count release spends δ/10 per query directly, which 10,000 releases at the
default δ (1 % of the budget's) would take past the filter's δ share under global
accounting.

    python benchmarks/bench_ledger.py [--quick] [--threads 1] [--out PATH]
    python benchmarks/bench_ledger.py --journal WAL WAL+checkpoint DELETE TRUNCATE
    python benchmarks/bench_ledger.py --advice [--rounds 5] [--advice-sizes 0 100 1000]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import io
import math
import os
import platform
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _bench  # noqa: E402
from _bench import choose_radius, threads_info  # noqa: E402

if __name__ == "__main__":
    _bench.limit_threads(sys.argv[1:])

import numpy as np  # noqa: E402

import brace  # noqa: E402
from brace.footprints import footprints  # noqa: E402
from brace.ledger import Ledger  # noqa: E402
from brace.ledger import sqlite as ledger_module  # noqa: E402
from brace.plan import plan_release  # noqa: E402

EPS, DELTA, BUDGET = 1.0, 1e-9, (1e9, 1e-5)


make_bank = _bench.mixture_bank  # (n, d, rng): bench_retrieve.py's mixture, from rng
fresh_queries = _bench.near_rows  # (X, m, rng): bank rows plus N(0, 0.5² I), no repeats


def populate(path: Path, X: np.ndarray, r: float, size: int, real: int, accounting: str,
             T: int, rng: np.random.Generator, budget: tuple = BUDGET) -> dict[str, Any]:
    """Create the ledger and record ``size`` one-query releases (``real`` of them through
    ``PrivateMemory.retrieve``, the rest appended; module docstring)."""
    t0 = time.perf_counter()
    pm = brace.PrivateMemory(X, radius=r, budget=budget, ledger=path, create=True,
                             accounting=accounting)
    real = min(real, size)
    for _ in range(real):
        pm.retrieve(fresh_queries(X, 1, rng), steps=T, epsilon=EPS, delta=DELTA,
                    seed=rng.integers(2**63))
    template = dict(pm.releases[0])  # each row appended below is a release of its own,
    template["params"] = {k: v for k, v in template["params"].items()  # no completion
                          if k != "completes"}
    del pm  # PrivateMemory has no close(): its connection closes with the object
    gc.collect()
    mem = brace.LSRMemory(X, radius=r)
    plan = plan_release(mem, method="brace", epsilon=EPS, delta=DELTA, steps=T, queries=1)
    led = Ledger.open(path)
    left = size - real
    batch = 100
    while left > 0:
        m = min(batch, left)
        q = fresh_queries(X, m, rng)
        res = brace.private_retrieve(mem, q, method="brace", epsilon=EPS, delta=DELTA,
                                     steps=T, seed=rng.integers(2**63))
        if res.params["release"] != template["release"]:
            raise RuntimeError("the batched release's mode differs from the real one's")
        fp = footprints(plan, q, res.outputs)
        k = fp.radii.shape[0] // m
        counts = getattr(res, "released_counts", None)
        with led.transaction():
            for j in range(m):
                key = hashlib.sha256(q[j].tobytes() + b"bench_ledger").hexdigest()
                led.append(call_key=key, record=template, outputs=res.outputs[j:j + 1],
                           released_counts=None if counts is None else counts[j:j + 1],
                           centres=fp.centres[j * k:(j + 1) * k],
                           radii=fp.radii[j * k:(j + 1) * k])
        left -= m
    led.close()
    return {"populate_s": time.perf_counter() - t0, "real": real,
            "release": template["release"]}


def measure(X: np.ndarray, r: float, size: int, accounting: str, T: int, calls: int,
            real: int, rng: np.random.Generator, workdir: Path,
            profile: bool = False) -> dict[str, Any]:
    path = workdir / f"ledger-{accounting}-{size}.db"
    info = populate(path, X, r, size, real, accounting, T, rng)
    gc.collect()
    t0 = time.perf_counter()
    pm = brace.PrivateMemory(X, radius=r, budget=BUDGET, ledger=path, accounting=accounting)
    open_s = time.perf_counter() - t0
    if len(pm.releases) != size:
        raise RuntimeError(f"ledger holds {len(pm.releases)} releases, expected {size}")
    spent0 = pm.spent
    mem = brace.LSRMemory(X, radius=r)
    q0 = fresh_queries(X, 1, rng)  # warm-up of both paths (plan caches, first pass)
    brace.private_retrieve(mem, q0, method="brace", epsilon=EPS, delta=DELTA, steps=T, seed=0)
    pm.retrieve(q0, steps=T, epsilon=EPS, delta=DELTA, seed=0)
    t_pm, t_pr = [], []
    for i in range(calls):
        q = fresh_queries(X, 1, rng)
        seed = int(rng.integers(2**63))
        order = (0, 1) if i % 2 == 0 else (1, 0)
        for which in order:
            t0 = time.perf_counter()
            if which == 0:
                pm.retrieve(q, steps=T, epsilon=EPS, delta=DELTA, seed=seed)
                t_pm.append(time.perf_counter() - t0)
            else:
                brace.private_retrieve(mem, q, method="brace", epsilon=EPS, delta=DELTA,
                                       steps=T, seed=seed)
                t_pr.append(time.perf_counter() - t0)
    over = np.array(t_pm) - np.array(t_pr)
    out = {
        "accounting": accounting, "recorded": size, **info, "open_s": open_s,
        "retrieve_median_s": float(np.median(t_pm)),
        "private_retrieve_median_s": float(np.median(t_pr)),
        "overhead_median_s": float(np.median(over)),
        "overhead_iqr_s": [float(np.percentile(over, 25)), float(np.percentile(over, 75))],
        "calls": calls, "spent_before": spent0, "spent_after": pm.spent,
        "ledger_mib": path.stat().st_size / 2**20,
    }
    if profile:  # apart from the timings: a second open and 5 more calls, profiled
        p_open, p_call = cProfile.Profile(), cProfile.Profile()
        with p_open:
            brace.PrivateMemory(X, radius=r, budget=BUDGET, ledger=path,
                                accounting=accounting)
        gc.collect()
        with p_call:
            for _ in range(5):
                pm.retrieve(fresh_queries(X, 1, rng), steps=T, epsilon=EPS, delta=DELTA,
                            seed=int(rng.integers(2**63)))
        for what, prof in (("open", p_open), ("5 retrieve calls", p_call)):
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(12)
            print(f"--- profile: {accounting}, {size} recorded, {what} (by own time)\n"
                  + buf.getvalue().split("\n\n", 1)[-1].strip(), file=sys.stderr)
    del pm
    gc.collect()
    return out


def use_journal(journal: str) -> Any:
    """Give every ledger connection the journal mode ``journal`` (``WAL+checkpoint``:
    WAL with a checkpoint after every commit); returns the undo."""
    real_connect = ledger_module.connect
    real_mode = ledger_module.JOURNAL_MODE
    sql = "WAL" if journal == "WAL+checkpoint" else journal

    def connect(path, timeout, *, mode="rw", immutable=False):
        conn = real_connect(path, timeout, mode=mode, immutable=immutable)
        if mode != "ro":
            conn.execute(f"PRAGMA journal_mode={sql}")
            if journal == "WAL+checkpoint":
                conn.execute("PRAGMA wal_autocheckpoint=1")
        return conn

    ledger_module.JOURNAL_MODE = sql
    ledger_module.connect = connect

    def undo() -> None:
        ledger_module.connect = real_connect
        ledger_module.JOURNAL_MODE = real_mode

    return undo


def journal_study(a: argparse.Namespace, X: np.ndarray, r: float, calls: int,
                  rng: np.random.Generator, workdir: Path) -> list[dict[str, Any]]:
    rows = []
    for mode in a.journal:
        undo = use_journal(mode)
        try:
            row = measure(X, r, 10, "global", a.steps, calls, a.real, rng,
                          workdir / mode.replace("+", "_"))
        finally:
            undo()
        row["journal"] = mode
        rows.append(row)
        print(f"  {mode:>15}: retrieve {row['retrieve_median_s'] * 1e3:.1f} ms, "
              f"private_retrieve {row['private_retrieve_median_s'] * 1e3:.1f} ms, overhead "
              f"{row['overhead_median_s'] * 1e3:.1f} ms (IQR "
              f"{row['overhead_iqr_s'][0] * 1e3:.1f}-{row['overhead_iqr_s'][1] * 1e3:.1f})",
              flush=True)
    return rows


ADVICE_BUDGET = (100.0, 1e-5)

_COLD = """
import json, sys, time
BUDGET = tuple(json.loads(sys.argv[5]))
t0 = time.perf_counter()
import numpy as np
import brace
t1 = time.perf_counter()
bank, ledger, r, which = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
pm = brace.PrivateMemory(np.load(bank), radius=r, budget=BUDGET, ledger=ledger)
q = np.load(bank.replace("bank.npy", "q.npy"))
t2 = time.perf_counter()
v = (pm.recommend(1000).per_query_epsilon if which == "recommend"
     else pm.affordable_epsilon(q, steps=3))
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "open_s": t2 - t1, "ask_s": t3 - t2, "answer": v}))
"""


def advice_study(sizes: list[int], rounds: int, cold_runs: int, rng: np.random.Generator,
                 workdir: Path) -> dict[str, Any]:
    """``recommend(1000)`` and ``affordable_epsilon(3 queries, T=3)`` at each ledger size
    (module docstring): warm (this process; the first ask on the opened ledger, then
    after each of ``rounds`` releases and asked again) and cold (``cold_runs`` fresh
    processes each: import, open, one ask)."""
    import json
    import subprocess

    X = make_bank(20_000, 8, rng)
    pilot = fresh_queries(X, 256, rng)
    r, _ = choose_radius(X, pilot, 50 / X.shape[0])
    q = fresh_queries(X, 3, rng)
    np.save(workdir / "bank.npy", X)
    np.save(workdir / "q.npy", q)
    asks = {"recommend": lambda pm: pm.recommend(1000).per_query_epsilon,
            "affordable_epsilon": lambda pm: pm.affordable_epsilon(q, steps=3)}
    rows = []
    for size in sizes:
        path = workdir / f"advice-{size}.db"
        if size:
            populate(path, X, r, size, min(5, size), "local", 3, rng, budget=ADVICE_BUDGET)
        else:
            brace.PrivateMemory(X, radius=r, budget=ADVICE_BUDGET, ledger=path,
                                create=True).close()
        row: dict[str, Any] = {"recorded": size}
        for name in asks:  # cold first: the warm rounds below add releases
            runs = []
            for _ in range(cold_runs):
                out = subprocess.run([sys.executable, "-c", _COLD, str(workdir / "bank.npy"),
                                      str(path), repr(r), name,
                                      json.dumps(ADVICE_BUDGET)],
                                     capture_output=True, text=True, check=True)
                runs.append(json.loads(out.stdout))
            row[f"{name}_cold_s"] = float(np.median([x["ask_s"] for x in runs]))
            row["import_cold_s"] = float(np.median([x["import_s"] for x in runs]))
        pm = brace.PrivateMemory(X, radius=r, budget=ADVICE_BUDGET, ledger=path)
        for name, ask in asks.items():
            t0 = time.perf_counter()
            row[f"{name}_answer"] = float(ask(pm))
            row[f"{name}_first_s"] = time.perf_counter() - t0
        times: dict[str, dict[str, list[float]]] = {
            k: {"after": [], "again": [], "after_cpu": []} for k in asks}
        for i in range(rounds):
            pm.retrieve(fresh_queries(X, 1, rng), steps=3, epsilon=EPS, delta=DELTA, seed=i)
            for name, ask in asks.items():
                for when in ("after", "again"):
                    t0, c0 = time.perf_counter(), time.process_time()
                    ask(pm)
                    times[name][when].append(time.perf_counter() - t0)
                    if when == "after":
                        times[name]["after_cpu"].append(time.process_time() - c0)
        pm.close()
        for name in asks:
            for when in ("after", "again", "after_cpu"):
                row[f"{name}_{when}_s"] = float(np.median(times[name][when]))
        rows.append(row)
        print(f"  S={size:>5}: " + "; ".join(
            f"{name} cold {row[f'{name}_cold_s'] * 1e3:.0f} ms, first "
            f"{row[f'{name}_first_s'] * 1e3:.0f} ms, after a release "
            f"{row[f'{name}_after_s'] * 1e3:.1f} ms (CPU "
            f"{row[f'{name}_after_cpu_s'] * 1e3:.1f} ms), again "
            f"{row[f'{name}_again_s'] * 1e3:.2f} ms" for name in asks)
            + f"; import {row['import_cold_s'] * 1e3:.0f} ms", flush=True)
    return {"n": X.shape[0], "d": X.shape[1], "radius": r, "budget": list(ADVICE_BUDGET),
            "rounds": rounds, "cold_runs": cold_runs, "results": rows}


def main(argv: list[str] | None = None) -> int:
    p = _bench.parser(__doc__, quick="sizes 10 and 1,000, 11 calls")
    p.add_argument("--sizes", type=int, nargs="+", help="recorded releases (10 10000)")
    p.add_argument("--accountings", nargs="+", default=["local", "global"],
                   choices=["local", "global"])
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--d", type=int, default=8)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--gate", type=int, default=50, help="memories in a median gate")
    p.add_argument("--calls", type=int, help="timed calls per cell (default 31)")
    p.add_argument("--real", type=int, default=5, help="releases recorded by retrieve")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dir", help="directory for the ledgers (default: a temporary one)")
    p.add_argument("--profile", action="store_true",
                   help="at the largest size, after the timings: cProfile a second open "
                   "and 5 more calls")
    p.add_argument("--journal", nargs="+", metavar="MODE",
                   choices=["WAL", "WAL+checkpoint", "DELETE", "TRUNCATE", "PERSIST"],
                   help="instead: per-call overhead for each journal mode (S = 10, global)")
    p.add_argument("--advice", action="store_true",
                   help="instead: recommend and affordable_epsilon on a 20,000-row bank")
    p.add_argument("--rounds", type=int, default=5, help="--advice: releases asked after")
    p.add_argument("--advice-sizes", type=int, nargs="+", default=[0, 100, 1000],
                   help="--advice: recorded releases (0 100 1000)")
    p.add_argument("--cold-runs", type=int, default=3,
                   help="--advice: fresh processes per question and size")
    a = p.parse_args(argv)
    sizes = a.sizes or ([10, 1000] if a.quick else [10, 10_000])
    calls = a.calls or (11 if a.quick else 31)
    if min(sizes) < 1 or calls < 1 or a.n < 2 or a.d < 1 or a.steps < 1:
        p.error("sizes, calls, n, d, steps must be positive")

    rng = np.random.default_rng(a.seed)
    if a.advice:
        print(f"public questions: numpy {np.__version__}, python "
              f"{platform.python_version()}, {os.cpu_count()} CPUs")
        with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
            adv = advice_study(a.advice_sizes, a.rounds, a.cold_runs, rng, Path(tmp))
        _bench.save_json(a.json, {"benchmark": "bench_ledger --advice",
                                  **_bench.environment(), **adv})
        return 0
    X = make_bank(a.n, a.d, rng)
    pilot = fresh_queries(X, 256, rng)
    r, gate = _bench.pilot_radius(X, pilot, a.gate)
    started = _bench.now()
    print(f"ledger overhead: n={a.n}, d={a.d}, T={a.steps}, r={r:.4g} (median gate "
          f"{gate:.0f}), eps={EPS:g}, delta={DELTA:g} per query, budget {BUDGET}, "
          f"{calls} calls per cell; numpy {np.__version__}, python "
          f"{platform.python_version()}, {os.cpu_count()} CPUs, threads: {threads_info()}")
    rows = []
    if a.journal:
        with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
            for mode in a.journal:
                (Path(tmp) / mode.replace("+", "_")).mkdir()
            rows = journal_study(a, X, r, calls, rng, Path(tmp))
        _bench.save_json(a.json, {"benchmark": "bench_ledger --journal", "started": started,
                                  **_bench.environment(), "results": rows})
        return 0
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        for acc in a.accountings:
            for size in sizes:
                row = measure(X, r, size, acc, a.steps, calls, a.real, rng, Path(tmp),
                              profile=a.profile and size == max(sizes))
                rows.append(row)
                print(f"  {acc:>6} S={size:>6}: open {row['open_s']:.3f} s, retrieve "
                      f"{row['retrieve_median_s'] * 1e3:.1f} ms, private_retrieve "
                      f"{row['private_retrieve_median_s'] * 1e3:.1f} ms, overhead "
                      f"{row['overhead_median_s'] * 1e3:.1f} ms (populated in "
                      f"{row['populate_s']:.1f} s)", flush=True)
    verdicts = {}
    for acc in a.accountings:
        cells = sorted((r_ for r_ in rows if r_["accounting"] == acc),
                       key=lambda r_: r_["recorded"])
        lo, hi = cells[0], cells[-1]
        ratio = hi["overhead_median_s"] / lo["overhead_median_s"] \
            if lo["overhead_median_s"] > 0 else math.inf
        verdicts[acc] = {"small": lo["recorded"], "large": hi["recorded"], "ratio": ratio,
                         "open_ratio": hi["open_s"] / lo["open_s"], "met": ratio <= 2.0}
        print(f"{acc}: overhead at {hi['recorded']} / at {lo['recorded']} = {ratio:.2f} "
              f"(target <= 2: {'met' if ratio <= 2.0 else 'NOT met'})")
    _bench.save_json(a.json, {
        "benchmark": "bench_ledger",
        "started": started,
        "settings": {"n": a.n, "d": a.d, "steps": a.steps, "radius": r,
                     "median_gate": gate, "epsilon": EPS,
                     "delta": DELTA, "budget": list(BUDGET), "calls": calls,
                     "real": a.real, "sizes": sizes, "seed": a.seed,
                     "quick": a.quick, "method": "brace (default release)"},
        **_bench.environment(), "results": rows, "target": verdicts,
    })
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
