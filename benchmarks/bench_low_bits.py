"""Low bits of plain noise: how often a release names its bank with certainty.

The attack of ``benchmarks/lowbits_attack.py`` (``docs/audit.md``, "Low bits of plain
noise"): two neighbouring banks (``neighbour_banks``: ``n = 100`` rows in the ball of
radius ``0.8r`` around the public query, ``r = 1``; the neighbour reflects one row through
the query), releases from bank A, and for each release the attacker — who knows both
banks, the query, the parameters and the public noise std, not the seed — asks whether
every released coordinate can be ``fl(p + fl(s·ξ))`` with ``ξ`` a value numpy's ziggurat
returns, for each bank's pre-noise point ``p``. A release *identifies* A when it is
consistent with A and impossible under B; identifying B would be an error (counted, and
the run fails if it is ever non-zero).

Cells: d ∈ {8, 64}, centred data (query at 0) or offset (+10 in every coordinate),
ε ∈ {1, 4}, δ = 1e-5, the global release and BRACE's count release, ``--releases`` each,
no output projection (so every step can be inverted), plain mode with fresh seeds from
the operating system; then secure mode (the same cells; consistent with a bank iff every
coordinate is on the public grid, so nothing is identified), and the smooth BRACE
release (its std is data-dependent, each bank's own from its certificate; in secure mode
its grid comes from the public floor 2r/n).

A second table runs the centred cells with the output projection (the default): a step
whose projection bound is skipped by the attack (it inverts only ``fl(q + fl(y − q))``,
the projection that did not bind); ``unbound`` is the share of steps where it did not.

Columns: ``std`` the noise std of the first step; ``plain id`` the share identified
(numpy's ziggurat values); ``any-double id`` the share identified when every double is
allowed as ``ξ`` (what the rounding of ``s·ξ`` and ``p + ·`` alone reveals); ``secure id``.

    python benchmarks/bench_low_bits.py [--releases 300] [--steps 1] [--json PATH]
"""

from __future__ import annotations

import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _bench  # noqa: E402
import lowbits_attack as L  # noqa: E402
import numpy as np  # noqa: E402

import brace  # noqa: E402

DELTA = 1e-5
BATCH = 100  # queries per call (one fresh seed per call)
RELEASES = {
    "global": (dict(method="global"), {}),
    "count": (dict(method="brace", release="count"), dict(release="count")),
    "smooth": (dict(method="brace", release="smooth", kappa=math.inf),
               dict(release="smooth", kappa=math.inf)),
}


def run_cell(wi: np.ndarray, *, d: int, offset: float, epsilon: float, release: str,
             noise: str, releases: int, steps: int, projection: bool = False) -> dict:
    """Attack ``releases`` releases of one cell; the shares and counts."""
    A, B, q = L.neighbour_banks(d, offset=offset)
    call, plan_kw = RELEASES[release]
    counts = dict(releases=0, identified=0, identified_any=0, wrong=0, true_inconsistent=0)
    std, on_grid, grid_public, free = None, True, True, 0
    t0 = time.perf_counter()
    while counts["releases"] < releases:
        Q = min(BATCH, releases - counts["releases"])
        seed = None if noise == "secure" else int.from_bytes(os.urandom(8), "little")
        res = brace.private_retrieve(A, np.repeat(q, Q, axis=0), epsilon=epsilon,
                                     delta=DELTA, steps=steps, output_projection=projection,
                                     noise=noise, seed=seed, **call)
        v = L.attack(res, (A, B), wi, epsilon=epsilon, delta=DELTA,
                     public_std=release != "smooth", **plan_kw)
        counts["releases"] += Q
        counts["identified"] += int(v.identified_a.sum())
        counts["identified_any"] += int(v.identified_any_a.sum())
        counts["wrong"] += int(v.identified_b.sum() + v.identified_any_b.sum())
        counts["true_inconsistent"] += int(np.sum(~v.consistent_a))
        std = float(res.noise_std[0, 0])
        R = (np.arange(1, steps + 1) + 1) * res.params["radius"]
        dist = np.linalg.norm(res.outputs - res.queries[:, None, :], axis=2)
        free += int(np.sum(dist < (1 - L.PROJECTION_SLACK) * R))
        if noise == "secure":
            on_grid &= bool(np.all(L.consistent_secure(res.outputs, res.grid)))
            for bank in (A, B):
                g = L.public_grid(res, bank, epsilon=epsilon, delta=DELTA, **plan_kw)
                grid_public &= bool(np.array_equal(g, res.grid))
    n = counts["releases"]
    out = dict(d=d, data="centred" if offset == 0 else f"offset +{offset:g}",
               epsilon=epsilon, release=release, noise=noise, steps=steps,
               projection=projection, std=std, unbound_steps=free / (n * steps),
               share=counts["identified"] / n, share_any=counts["identified_any"] / n,
               seconds=round(time.perf_counter() - t0, 2), **counts)
    if noise == "secure":
        out.update(on_grid=on_grid, grid_public=grid_public)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = _bench.parser(__doc__, quick=None, threads=False)
    ap.add_argument("--releases", type=int, default=300, help="releases per cell")
    ap.add_argument("--steps", type=int, default=1, help="horizon T of each release")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    wi = L.recover_wi()
    checked, exact = L.check_wi(wi, seed=int.from_bytes(os.urandom(8), "little"))
    print(f"ziggurat table recovered: {exact}/{checked} fresh normals predicted exactly "
          f"({time.perf_counter() - t0:.1f} s); numpy {np.__version__}")
    rows = []
    for projection in (False, True):
        offsets = (0.0,) if projection else (0.0, 10.0)
        cells = [(d, off, eps) for d in (8, 64) for off in offsets for eps in (1.0, 4.0)]
        head = (f"{'d':>3} {'data':>10} {'eps':>4} {'release':>7} {'std':>9} "
                f"{'plain id':>9} {'any-double id':>13} {'secure id':>9}")
        if projection:
            head += f" {'unbound':>8}"
        print(f"\nT = {args.steps}, delta = {DELTA:g}, {args.releases} releases per cell, "
              + ("with the output projection (steps where it binds are skipped; "
                 "'unbound': share of steps where it did not)" if projection
                 else "no output projection"))
        print(head)
        print("-" * len(head))
        for d, off, eps in cells:
            for release in ("global", "count", "smooth"):
                kw = dict(d=d, offset=off, epsilon=eps, release=release,
                          releases=args.releases, steps=args.steps, projection=projection)
                plain = run_cell(wi, noise="plain", **kw)
                rows.append(plain)
                sec = run_cell(wi, noise="secure", **kw)  # smooth too (§13, Theorem 11)
                rows.append(sec)
                if not (sec["on_grid"] and sec["grid_public"]):
                    raise SystemExit(f"secure release off its public grid: {sec}")
                sec_txt = f"{sec['share']:.1%}"
                line = (f"{d:>3} {plain['data']:>10} {eps:>4g} {release:>7} "
                        f"{plain['std']:>9.4g} {plain['share']:>9.1%} "
                        f"{plain['share_any']:>13.1%} {sec_txt:>9}")
                if projection:
                    line += f" {plain['unbound_steps']:>8.1%}"
                print(line, flush=True)
    wrong = sum(r["wrong"] + r["true_inconsistent"] for r in rows)
    print(f"\nwrong identifications: {wrong}; total {time.perf_counter() - t0:.0f} s")
    _bench.save_json(args.json, dict(benchmark="low_bits", delta=DELTA, **_bench.environment(),
                                     releases_per_cell=args.releases, steps=args.steps,
                                     table_check=dict(checked=checked, exact=exact),
                                     cells=rows))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
