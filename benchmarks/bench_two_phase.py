"""What the two-phase record costs a call (``docs/ledger.md`` §4.1): the wall time of
``PrivateMemory.retrieve`` with an SQLite and a PostgreSQL ledger, and without one
(the computation alone), per call, p50 and p90.

The pending charge's commit skips the fsync (SQLite ``synchronous=NORMAL``, PostgreSQL
``synchronous_commit = off``); the completion's is durable as before. The script uses
only the public API, so the same file measures an earlier version for comparison:

    PYTHONPATH=src python benchmarks/bench_two_phase.py --out new.json
    PYTHONPATH=/path/to/earlier/src python benchmarks/bench_two_phase.py --out old.json

PostgreSQL runs on a throw-away server (``tests/pgserver.py``), skipped without the
binaries or psycopg. ``--phases`` (this version only) also times the two transactions
of a call apart, and the transaction the two-phase record adds, alone. Commit latency
on a shared disk comes in steps of a few milliseconds, which blurs whole calls
compared across versions; the added transaction alone is the sharper figure.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _bench  # noqa: E402
import numpy as np  # noqa: E402

import brace  # noqa: E402


def timed_calls(ledger: Any, X: np.ndarray, calls: int, warm: int, seed: int
                ) -> list[float]:
    kw = {} if ledger is None else {"ledger": ledger, "create": True}
    pm = brace.PrivateMemory(X, radius=0.8, budget=(1e6, 1e-5), **kw)
    out = timed_calls_on(pm, X, calls, warm, seed)
    pm.close()
    return out


def phase_costs(ledger: Any, X: np.ndarray, calls: int, seed: int) -> dict[str, Any]:
    """The two transactions of a call timed apart (this version only): the pending
    charge's (priced, appended, committed without an fsync) and the completion's
    (synced, appended, durable), per call, p50 ms."""
    from brace.ledger import Ledger

    pm = brace.PrivateMemory(X, radius=0.8, budget=(1e6, 1e-5), ledger=ledger,
                             create=True)
    db = pm._db
    real = type(db).transaction
    spans: dict[bool, list[float]] = {True: [], False: []}

    def timed(self: Ledger, durable: bool = True) -> Any:
        import contextlib

        @contextlib.contextmanager
        def cm() -> Any:
            t0 = time.perf_counter()
            with real(self, durable):
                yield
            spans[durable].append(1e3 * (time.perf_counter() - t0))
        return cm()

    type(db).transaction = timed
    try:
        timed_calls_on(pm, X, calls, 10, seed)
    finally:
        type(db).transaction = real
        pm.close()
    return {"pending_tx_p50_ms": float(np.median(spans[False][10:])),
            "completion_tx_p50_ms": float(np.median(spans[True][10:]))}


def extra_transaction(ledger: Any, X: np.ndarray, calls: int) -> dict[str, Any]:
    """What the two-phase record adds to a call, timed alone (this version only): one
    more transaction — the lock, the metadata and the rows since the last look read and
    verified, one pending row built, chained and appended, ``COMMIT`` without an fsync
    (``PrivateMemory._admission`` and ``_reserve``; the pricing, which the one
    transaction of an earlier version held too, left out), per call, p50 ms."""
    from brace.plan import plan_release

    pm = brace.PrivateMemory(X, radius=0.8, budget=(1e6, 1e-5), ledger=ledger,
                             create=True)
    q = X[:2]
    plan = plan_release(pm._memory, method="brace", epsilon=1.0, delta=1e-7, steps=2,
                        queries=2, seeded=True)
    charge = pm._charge_row(plan, q, 2, 1.0, 1e-7, "brace", pm._reserved(plan, q), "k")
    ms = []
    for i in range(10 + calls):
        t0 = time.perf_counter()
        with pm._admission():
            pm._reserve([charge])
        if i >= 10:
            ms.append(1e3 * (time.perf_counter() - t0))
    pm.close()
    return {"extra_tx_p50_ms": float(np.median(ms)),
            "extra_tx_p90_ms": float(np.percentile(ms, 90))}


def timed_calls_on(pm: Any, X: np.ndarray, calls: int, warm: int, seed: int
                   ) -> list[float]:
    """Seconds of each of ``calls`` calls after ``warm`` untimed ones (fresh queries)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(warm + calls):
        q = _bench.near_rows(X, 2, rng, spread=1e-3)
        t0 = time.perf_counter()
        pm.retrieve(q, steps=2, epsilon=1.0, delta=1e-7, seed=i, fresh=True)
        if i >= warm:
            out.append(time.perf_counter() - t0)
    return out


def summary(seconds: list[float]) -> dict[str, float]:
    return _bench.latency(seconds, (50, 90))


def main(argv: list[str] | None = None) -> int:
    p = _bench.parser(__doc__, quick=None, threads=False)
    p.add_argument("--calls", type=int, default=150)
    p.add_argument("--warm", type=int, default=10)
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--d", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-pg", action="store_true", help="skip PostgreSQL")
    p.add_argument("--phases", action="store_true",
                   help="also time the two transactions of a call apart (this version)")
    a = p.parse_args(argv)
    X = np.random.default_rng(a.seed).normal(size=(a.n, a.d))
    res: dict[str, Any] = {"brace": brace.__file__, "n": a.n, "d": a.d}
    res["memory"] = summary(timed_calls(None, X, a.calls, a.warm, a.seed))
    with tempfile.TemporaryDirectory() as tmp:
        res["sqlite"] = summary(timed_calls(Path(tmp) / "l.db", X, a.calls, a.warm,
                                            a.seed))
        if a.phases:
            res["sqlite"].update(phase_costs(Path(tmp) / "p.db", X, a.calls, a.seed))
            res["sqlite"].update(extra_transaction(Path(tmp) / "e.db", X, a.calls))
    with _bench.temp_postgres(not a.no_pg) as server:
        if server is not None:
            url = server.new_schema(f"bench{os.getpid()}")
            res["postgresql"] = summary(timed_calls(url, X, a.calls, a.warm, a.seed))
            if a.phases:
                url = server.new_schema(f"phases{os.getpid()}")
                res["postgresql"].update(phase_costs(url, X, a.calls, a.seed))
                url = server.new_schema(f"extra{os.getpid()}")
                res["postgresql"].update(extra_transaction(url, X, a.calls))
    for k in ("sqlite", "postgresql"):
        if k in res:
            res[k]["ledger_p50_ms"] = res[k]["p50_ms"] - res["memory"]["p50_ms"]
    print(json.dumps(res, indent=1))
    _bench.save_json(a.json, {"benchmark": "bench_two_phase", **_bench.environment(), **res})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
