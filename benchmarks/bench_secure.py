"""Cost of secure mode (``noise="secure"``) against the plain release (target: within 2×).

Same bank and queries as ``bench_retrieve.py`` (seeded Gaussian mixture, radius so a
typical gate holds ≈1 % of the bank), ε = 4, δ = 1e-5. For each cell and release (BRACE's
count release, global, endpoint) the median of ``--repeats`` timed calls after one
warm-up, plain (seeded) and secure, and their ratio; then the exact discrete Gaussian
sampler alone (µs per coordinate at σ ≈ 2^20, the secure grid's scale) and, if it is
installed, OpenDP's vectorised discrete Gaussian (``make_gaussian`` on integer vectors).

    python benchmarks/bench_secure.py [--threads 1] [--d 64 384] [--repeats 5] [--json PATH]

The target cell is n = 1e5, d = 64, Q = 256, T = 5; d = 384 reports the cost in high
dimension.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_retrieve import (  # noqa: E402
    _apply_thread_limit,
    choose_radius,
    make_bank,
    make_queries,
    threads_info,
)

if __name__ == "__main__":
    _apply_thread_limit(sys.argv[1:])

import numpy as np  # noqa: E402

from brace import LSRMemory, private_retrieve  # noqa: E402
from brace._io import write_json  # noqa: E402
from brace.discrete import discrete_gaussian_params, sample_discrete_gaussian  # noqa: E402

VARIANTS = (
    ("count", "brace", {"release": "count", "kappa": float("inf")}),
    ("global", "global", {}),
    ("endpoint", "endpoint", {}),
)


def _median(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_cell(n: int, d: int, Q: int, T: int, seed: int, repeats: int,
               variants: tuple) -> list[dict]:
    X = make_bank(n, d, seed)
    q = make_queries(X, Q, seed)
    r, _ = choose_radius(X, q, 0.01)
    mem = LSRMemory(X, radius=r)
    rows = []
    for label, method, kw in variants:
        def plain(method=method, kw=kw):
            return private_retrieve(mem, q, method=method, epsilon=4.0, delta=1e-5,
                                    steps=T, seed=0, **kw)

        def secure(method=method, kw=kw):
            return private_retrieve(mem, q, method=method, epsilon=4.0, delta=1e-5,
                                    steps=T, noise="secure", **kw)

        tp, ts = _median(plain, repeats), _median(secure, repeats)
        rows.append({"n": n, "d": d, "Q": Q, "T": T, "release": label, "plain_s": tp,
                     "secure_s": ts, "ratio": ts / tp})
        print(f"{n:>7} {d:>4} {label:>9} {tp:>9.3f} {ts:>9.3f} {ts / tp:>7.2f}x", flush=True)
    return rows


def bench_sampler(coords: int, repeats: int) -> dict:
    """µs per coordinate of the exact sampler (and of OpenDP's, where installed)."""
    t, m = discrete_gaussian_params(2**40)
    tt = np.full(coords, t)
    out = {"coords": coords, "brace_us": 1e6 * _median(
        lambda: sample_discrete_gaussian(tt, m), repeats) / coords}
    try:
        import opendp.prelude as dp
    except ImportError:
        out["opendp_us"] = None
        return out
    dp.enable_features("contrib")
    meas = dp.m.make_gaussian(dp.vector_domain(dp.atom_domain(T=int)),
                              dp.l2_distance(T=int), scale=2.0**20)
    x = [0] * coords
    out["opendp_us"] = 1e6 * _median(lambda: meas(x), repeats) / coords
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=None, help="BLAS threads (before import)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--d", type=int, nargs="+", default=[64, 384])
    p.add_argument("--Q", type=int, default=256)
    p.add_argument("--T", type=int, default=5)
    p.add_argument("--repeats", type=int, default=5, help="timed calls per cell (median)")
    p.add_argument("--releases", nargs="+", default=[v[0] for v in VARIANTS],
                   choices=[v[0] for v in VARIANTS])
    p.add_argument("--json", metavar="PATH")
    a = p.parse_args(argv)
    variants = tuple(v for v in VARIANTS if v[0] in a.releases)
    print(f"threads: {threads_info()}; Q = {a.Q}, T = {a.T}, epsilon = 4, delta = 1e-5; "
          f"median of {a.repeats}")
    print(f"{'n':>7} {'d':>4} {'release':>9} {'plain s':>9} {'secure s':>9} {'ratio':>8}")
    rows = []
    for d in a.d:
        rows += bench_cell(a.n, d, a.Q, a.T, a.seed, a.repeats, variants)
    samp = bench_sampler(a.Q * 64, a.repeats)
    od = samp["opendp_us"]
    print(f"sampler, sigma = 2^20, {samp['coords']} coordinates: brace "
          f"{samp['brace_us']:.2f} us/coordinate; OpenDP "
          + ("not installed" if od is None else f"{od:.2f} us/coordinate"))
    if a.json:
        write_json(a.json, {"rows": rows, "sampler": samp, "threads": threads_info()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
