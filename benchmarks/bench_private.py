"""Cost of private retrieval relative to noiseless retrieval (issue: BRACE ≤ 3× noiseless).

Same bank and queries as ``bench_retrieve.py`` (seeded Gaussian mixture, radius so a
typical gate holds ≈1 % of the bank). For each (n, d): time of noiseless
``LSRMemory.retrieve`` and of ``private_retrieve`` for every method, the best of
``--repeats`` (default 3) timed calls after one warm-up call, and the ratio. BRACE is
run at κ = 0 (full correction: the clean trajectory recursion runs) and κ = 128 (never
activates for T = 5: no recursion).

    python benchmarks/bench_private.py [--quick] [--threads 1] [--json PATH]
    python benchmarks/bench_private.py --n 100000 --d 64     # one cell of the grid

The target cell of issue 13 is n = 1e5, d = 64, Q = 256, T = 5: BRACE κ = 0 within 3×
of noiseless retrieval.
"""

from __future__ import annotations

import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _bench  # noqa: E402
from _bench import choose_radius, make_bank, make_queries, threads_info  # noqa: E402

if __name__ == "__main__":
    _bench.limit_threads(sys.argv[1:])

from brace import LSRMemory, NotPrivateWarning, private_retrieve  # noqa: E402

VARIANTS = (
    ("brace k=0", "brace", 0.0),
    ("brace k=128", "brace", 128.0),
    ("global", "global", 0.0),
    ("endpoint", "endpoint", 0.0),
    ("naive (NOT DP)", "naive", 0.0),
)


def bench(n: int, d: int, Q: int, T: int, seed: int, repeats: int = 1) -> dict:
    X = make_bank(n, d, seed)
    q = make_queries(X, Q, seed)
    r, _ = choose_radius(X, q, 0.01)
    mem = LSRMemory(X, radius=r)
    base = _bench.timed(lambda: mem.retrieve(q, T), repeats).best  # best after a warm-up
    row = {"n": n, "d": d, "Q": Q, "T": T, "radius": r, "noiseless_s": base}
    for label, method, kappa in VARIANTS:
        def call(method=method, kappa=kappa):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", NotPrivateWarning)
                return private_retrieve(mem, q, method=method, epsilon=64.0, delta=1e-5,
                                        steps=T, kappa=kappa, seed=0)
        t = _bench.timed(call, repeats).best
        row[f"{label}_s"] = t
        row[f"{label}_ratio"] = t / base
    return row


def main(argv: list[str] | None = None) -> int:
    p = _bench.parser(__doc__)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n", type=int, nargs="+", help="bank sizes (default: the grid)")
    p.add_argument("--d", type=int, nargs="+", help="dimensions (default: the grid)")
    p.add_argument("--repeats", type=int, default=3, help="timed calls per cell (the best)")
    a = p.parse_args(argv)
    ns, ds = ((1000,), (2,)) if a.quick else ((1000, 10_000, 100_000), (2, 64))
    ns, ds = tuple(a.n or ns), tuple(a.d or ds)
    Q, T = (32, 3) if a.quick else (256, 5)
    print(f"threads: {threads_info()}; Q = {Q}, T = {T}, epsilon = 64, delta = 1e-5")
    head = f"{'n':>7} {'d':>3} {'noiseless s':>11} " + " ".join(f"{v[0]:>15}" for v in VARIANTS)
    print(head + "   (ratio to noiseless)")
    rows = []
    for n in ns:
        for d in ds:
            row = bench(n, d, Q, T, a.seed, a.repeats)
            rows.append(row)
            print(f"{n:>7} {d:>3} {row['noiseless_s']:>11.4f} "
                  + " ".join(f"{row[v[0] + '_ratio']:>14.2f}x" for v in VARIANTS))
    _bench.save_json(a.json, {"benchmark": "bench_private", "rows": rows,
                              **_bench.environment()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
