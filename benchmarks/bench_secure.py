"""Cost of secure noise (the default without a seed) against the plain release.

Targets: secure/plain ≤ 1.3× at n = 1e5 and ≤ 2× at n = 2,000 (d ∈ {64, 384}, Q = 64–256,
T = 3–5); the sampler ≤ 0.2 µs per coordinate. Same bank and queries as
``bench_retrieve.py`` (seeded Gaussian mixture, radius so a typical gate holds ≈1 % of the
bank), ε = 4, δ = 1e-5. For each cell and release (BRACE's default release, the smooth
release, the count release, global, endpoint) the median of ``--repeats`` timed calls
after one warm-up, plain (seeded) and secure (no seed), wall-clock and CPU, and their
ratios; then the exact discrete Gaussian
sampler alone: µs per coordinate at σ ≈ 2^20 (the secure grid's scale), 2^30 and 2^45,
for 16 384 and 100 000 coordinates per call (one σ per call, and one σ per row of 64
as in a release), wall-clock and CPU time (medians), beside numpy's ``standard_normal``
and, if it is installed, OpenDP's vectorised discrete Gaussian (``make_gaussian`` on
i64 vectors; median of ``--opendp-repeats``). Last, the exact σ² of a secure step
(``secure.sigma2_params``, target ≤ 1 ms per step at Q = 1,000) against the per-row
``Fraction`` loop it replaced, at Q = 100, 1,000 and 10,000 smooth-release scales.

    python benchmarks/bench_secure.py [--threads 1] [--n 2000 100000] [--d 64 384]
        [--Q 64 256] [--T 3 5] [--releases default smooth ...] [--repeats 5] [--json PATH]
    python benchmarks/bench_secure.py --sampler-only [--threads 1] [--repeats 7]
    python benchmarks/bench_secure.py --sigma2-only [--repeats 7]
"""

from __future__ import annotations

import math
import os
import sys
from fractions import Fraction

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _bench  # noqa: E402
from _bench import choose_radius, make_bank, make_queries, threads_info  # noqa: E402

if __name__ == "__main__":
    _bench.limit_threads(sys.argv[1:])

import numpy as np  # noqa: E402

from brace import LSRMemory, private_retrieve  # noqa: E402
from brace.discrete import discrete_gaussian_scale, sample_discrete_gaussian  # noqa: E402
from brace.secure import SMOOTH_INFLATION, grid_unit, sigma2_params  # noqa: E402

VARIANTS = (
    ("default", "brace", {}),  # BRACE's default release (chosen from public values)
    ("smooth", "brace", {"release": "smooth"}),  # data-dependent scale (Theorem 11)
    ("count", "brace", {"release": "count", "kappa": float("inf")}),
    ("global", "global", {}),
    ("endpoint", "endpoint", {}),
)


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

        (tp, cp), (ts, cs) = _medians(plain, repeats), _medians(secure, repeats)
        rows.append({"n": n, "d": d, "Q": Q, "T": T, "release": label, "plain_s": tp,
                     "secure_s": ts, "ratio": ts / tp, "plain_cpu_s": cp,
                     "secure_cpu_s": cs, "cpu_ratio": cs / cp})
        print(f"{n:>7} {d:>4} {Q:>4} {T:>2} {label:>9} {tp:>9.3f} {ts:>9.3f} {ts / tp:>7.2f}x"
              f" {cp:>9.3f} {cs:>9.3f} {cs / cp:>7.2f}x", flush=True)
    return rows


def _medians(fn, repeats: int) -> tuple[float, float]:
    """Median wall-clock and CPU seconds of ``repeats`` calls after one warm-up."""
    t = _bench.timed(fn, repeats)
    return t.median, t.cpu_median


def bench_sampler(coords: tuple = (16_384, 100_000), log2_sigma: tuple = (20, 30, 45),
                  repeats: int = 5, opendp_repeats: int = 3) -> list[dict]:
    """µs per coordinate of the exact sampler (shared σ; one σ per row of 64), of numpy's
    ``standard_normal`` and of OpenDP's ``make_gaussian`` (where installed)."""
    try:
        import opendp.prelude as dp
        dp.enable_features("contrib")
    except ImportError:
        dp = None
    rng = np.random.default_rng(0)
    rows = []
    for L in log2_sigma:
        t, m, f = discrete_gaussian_scale(2 ** (2 * L))
        # one σ per row of 64 coordinates, as in a release (σ² varying by up to 1 %)
        per_row = [discrete_gaussian_scale(2 ** (2 * L) * (1 + i / 6400)) for i in range(64)]
        for n in coords:
            tt = np.full(n, t)
            q = -(-n // 64)
            rt = np.array([p[0] for p in per_row] * (q // 64 + 1))[:q, None]
            rm = np.array([p[1] for p in per_row] * (q // 64 + 1))[:q, None]
            rf = np.array([p[2] for p in per_row] * (q // 64 + 1))[:q, None]
            rm = np.broadcast_to(rm, (q, 64))
            row = {"log2_sigma": L, "coords": n}
            w, c = _medians(lambda: sample_discrete_gaussian(tt, m, f), repeats)  # noqa: B023
            row["brace_us"], row["brace_cpu_us"] = 1e6 * w / n, 1e6 * c / n
            w, c = _medians(lambda: sample_discrete_gaussian(rt, rm, rf), repeats)  # noqa: B023
            row["brace_rows_us"], row["brace_rows_cpu_us"] = 1e6 * w / (64 * q), 1e6 * c / (64 * q)
            w, c = _medians(lambda: rng.standard_normal(n), repeats)  # noqa: B023
            row["numpy_normal_us"], row["numpy_normal_cpu_us"] = 1e6 * w / n, 1e6 * c / n
            row["opendp_us"] = row["opendp_cpu_us"] = None
            if dp is not None and opendp_repeats > 0:
                meas = dp.m.make_gaussian(dp.vector_domain(dp.atom_domain(T="i64")),
                                          dp.l2_distance(T="i64"), scale=float(2**L))
                x = [0] * n
                w, c = _medians(lambda: meas(x), opendp_repeats)  # noqa: B023
                row["opendp_us"], row["opendp_cpu_us"] = 1e6 * w / n, 1e6 * c / n
            rows.append(row)
            print(_sampler_line(row), flush=True)
    return rows


def _sampler_line(r: dict) -> str:
    def f(k):
        a, b = r[k + "_us"], r[k + "_cpu_us"]
        return f"{'-':>15}" if a is None else f"{a:>7.3f} ({b:>5.3f})"

    return (f"2^{r['log2_sigma']:<3} {r['coords']:>7} {f('brace'):>15} {f('brace_rows'):>15} "
            f"{f('numpy_normal'):>15} {f('opendp'):>15}")


SAMPLER_HEADER = (f"{'sigma':<5} {'coords':>7} {'brace':>15} {'brace, per row':>15} "
                  f"{'numpy normal':>15} {'OpenDP':>15}   us/coordinate: wall (CPU), medians")


def _sigma2_fraction_loop(sens: np.ndarray, g: np.ndarray, rho: float, d: int) -> list:
    """The former ``sigma2_params`` (data-dependent scale): one ``Fraction`` per row."""
    factor = (1 + SMOOTH_INFLATION) / (2 * Fraction(rho))
    root_d = Fraction(math.isqrt(d << 60) + 1, 1 << 30)
    return [discrete_gaussian_scale((Fraction(float(a)) / Fraction(float(b)) + root_d) ** 2
                                    * factor) for a, b in zip(sens, g, strict=True)]


def bench_sigma2(Qs: tuple = (100, 1_000, 10_000), repeats: int = 5) -> list[dict]:
    """ms per step of the exact σ² (vectorised) and of the per-row ``Fraction`` loop, at
    a smooth release's scales: n = 10^5, r = 1, d = 64, ρ = 0.05, Δ̄_t log-uniform in
    [2r/n, 2r], the grid from the public floor 2r/n."""
    n, r, d, rho = 100_000, 1.0, 64, 0.05
    rows = []
    for Q in Qs:
        rng = np.random.default_rng(Q)
        sens = 2 * r * np.exp(rng.uniform(math.log(1 / n), 0.0, Q))
        g = grid_unit(np.full(Q, 2 * r / n / math.sqrt(2 * rho)), r, d)
        new = sigma2_params(sens, g, rho, d, data_dependent=True)
        old = _sigma2_fraction_loop(sens, g, rho, d)
        if [tuple(int(c[i]) for c in new) for i in range(Q)] != old:
            raise AssertionError("sigma2_params differs from the Fraction loop")
        w_new, c_new = _medians(lambda: sigma2_params(sens, g, rho, d,  # noqa: B023
                                                      data_dependent=True), repeats)
        w_old, c_old = _medians(lambda: _sigma2_fraction_loop(sens, g, rho, d),  # noqa: B023
                                max(1, min(repeats, 3)))
        rows.append({"Q": Q, "vectorised_ms": 1e3 * w_new, "vectorised_cpu_ms": 1e3 * c_new,
                     "fraction_loop_ms": 1e3 * w_old, "fraction_loop_cpu_ms": 1e3 * c_old})
        print(f"{Q:>6} {1e3 * w_new:>10.3f} ({1e3 * c_new:>7.3f}) {1e3 * w_old:>10.3f} "
              f"({1e3 * c_old:>7.3f})", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = _bench.parser(__doc__, quick=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n", type=int, nargs="+", default=[2_000, 100_000])
    p.add_argument("--d", type=int, nargs="+", default=[64, 384])
    p.add_argument("--Q", type=int, nargs="+", default=[64, 256])
    p.add_argument("--T", type=int, nargs="+", default=[3, 5])
    p.add_argument("--repeats", type=int, default=5, help="timed calls per cell (median)")
    p.add_argument("--releases", nargs="+", default=[v[0] for v in VARIANTS],
                   choices=[v[0] for v in VARIANTS])
    p.add_argument("--no-sampler", action="store_true", help="skip the sampler's table")
    p.add_argument("--sampler-only", action="store_true",
                   help="time only the exact sampler (not the releases)")
    p.add_argument("--sigma2-only", action="store_true",
                   help="time only the exact sigma^2 of a step (sigma2_params)")
    p.add_argument("--opendp-repeats", type=int, default=3,
                   help="timed OpenDP calls per cell (median; 0 skips OpenDP)")
    a = p.parse_args(argv)
    rows = []
    if a.sigma2_only:
        a.sampler_only = a.no_sampler = True
    if not a.sampler_only:
        variants = tuple(v for v in VARIANTS if v[0] in a.releases)
        print(f"threads: {threads_info()}; epsilon = 4, delta = 1e-5; median of {a.repeats}"
              " (wall, then CPU)")
        print(f"{'n':>7} {'d':>4} {'Q':>4} {'T':>2} {'release':>9} {'plain s':>9} "
              f"{'secure s':>9} {'ratio':>8} {'plain cpu':>9} {'secure cpu':>9} {'ratio':>8}")
        for n in a.n:
            for d in a.d:
                for Q in a.Q:
                    for T in a.T:
                        rows += bench_cell(n, d, Q, T, a.seed, a.repeats, variants)
    samp = []
    if not a.no_sampler:
        print(f"the exact discrete Gaussian sampler; threads: {threads_info()}; median of "
              f"{a.repeats} (OpenDP: {a.opendp_repeats})")
        print(SAMPLER_HEADER)
        samp = bench_sampler(repeats=a.repeats, opendp_repeats=a.opendp_repeats)
    print(f"the exact sigma^2 of a step, ms per step: median of {a.repeats} (the loop: "
          f"{max(1, min(a.repeats, 3))}), wall (CPU)")
    print(f"{'Q':>6} {'vectorised':>20} {'Fraction loop':>20}")
    sig = bench_sigma2(repeats=a.repeats)
    _bench.save_json(a.json, {"benchmark": "bench_secure", "rows": rows, "sampler": samp,
                              "sigma2": sig, **_bench.environment()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
