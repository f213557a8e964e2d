"""Utility at real budgets: BRACE's noise against the oracle and against global noise.

For each (ε, d, m, T) a bank is built whose gate at the query holds exactly ``m``
memories (uniform in ``B̄(0, r/2)``; every other row is at least ``20r`` away), and
``--draws`` releases are made at that query. Reported, per cell and method:

* the median step-1 noise std, and its ratio to the **oracle** ``(2r/m)/sqrt(2ρ_0)`` — the
  noise a mechanism would add if it knew the gate size for free (``ρ_0``: the γ = 0
  per-step calibration of the same (ε, δ, T, d)) — and to **global** noise
  ``2r/sqrt(2ρ_0)``;
* the mean final per-coordinate squared error ``‖Y_T − z_T‖²/d``.

Methods: BRACE without correction (κ = ∞) with the default release (``release="auto"``:
the public choice of ``docs/privacy-accounting.md`` §10), the smooth release with the
fraction-0.9 γ rule (the default before 0.2), with the gate-size rule
(``gamma="gates"``), the count release (``release="count"``), and global. Targets
(``docs/utility.md``): within 2× of the oracle wherever ``m ≥ 20·log(1/δ)/ε``; never more
than 1.05× global.

    python benchmarks/bench_utility.py --quick          # a subset, about a minute
    python benchmarks/bench_utility.py --medium         # the full grid at T = 3
    python benchmarks/bench_utility.py --out runs/utility   # the full grid
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _bench  # noqa: E402
import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from brace import LSRMemory, private_retrieve  # noqa: E402
from brace.accounting import calibrate_rho  # noqa: E402
from brace.experiments._common import pyplot, save_figure  # noqa: E402
from brace.policy import choose_gamma_for_gates  # noqa: E402

FULL = dict(eps=(0.5, 1, 2, 4, 8, 16, 64, 128), dims=(2, 64, 384), gates=(10, 100, 1000, 10000),
            steps=(1, 3, 5))
QUICK = dict(eps=(1, 4, 8, 128), dims=(2, 64), gates=(100, 1000), steps=(3,))
MEDIUM = dict(FULL, steps=(3,))
R, DELTA, N = 0.5, 1e-5, 20_000


def gate_bank(m: int, d: int, n: int, seed: int) -> np.ndarray:
    """``m`` rows uniform in ``B̄(0, r/2)``, the other ``n − m`` rows at least ``20r`` away."""
    rng = np.random.default_rng(seed)
    u = rng.normal(size=(m, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    inner = u * (0.5 * R * rng.random((m, 1)) ** (1.0 / d))
    v = rng.normal(size=(n - m, d))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    far = v * (20 * R + rng.uniform(0, 40 * R, (n - m, 1)))
    return np.concatenate([inner, far])


def run(grid: dict, draws: int, seed: int) -> list[dict]:
    rows = []
    for d in grid["dims"]:
        for m in grid["gates"]:
            mem = LSRMemory(gate_bank(m, d, N, seed), radius=R)
            q = np.zeros((draws, d))
            for T in grid["steps"]:
                for eps in grid["eps"]:
                    rho0 = calibrate_rho(eps, DELTA, T, dim=d)
                    oracle = 2 * R / m / math.sqrt(2 * rho0)
                    glob = 2 * R / math.sqrt(2 * rho0)
                    row = dict(epsilon=eps, dim=d, gate=m, steps=T, oracle_std=oracle,
                               global_std=glob,
                               m_min=math.ceil(20 * math.log(1 / DELTA) / eps))
                    t0 = time.perf_counter()
                    g_gates = choose_gamma_for_gates(eps, DELTA, T, dim=d, n=N)
                    row["gamma_rule_seconds"] = time.perf_counter() - t0
                    for name, kw in (("brace_default", dict(method="brace")),
                                     ("brace_fraction", dict(method="brace", release="smooth",
                                                             gamma=None)),
                                     ("brace_gates", dict(method="brace", gamma=g_gates)),
                                     ("brace_count", dict(method="brace", release="count")),
                                     ("global", dict(method="global"))):
                        res = private_retrieve(mem, q, epsilon=eps, delta=DELTA, steps=T,
                                               kappa=math.inf, seed=seed, return_clean=True,
                                               **kw)
                        std = float(np.median(res.noise_std[:, 0]))
                        err = float(np.mean((res.final - res.clean[:, -1]) ** 2))
                        row[f"{name}_std"] = std
                        row[f"{name}_over_oracle"] = std / oracle
                        row[f"{name}_over_global"] = std / glob
                        row[f"{name}_final_error"] = err
                        row[f"{name}_gamma"] = res.params["gamma"]
                        row[f"{name}_release"] = res.params["release"]
                    rows.append(row)
                    print(f"eps={eps:<5g} d={d:<3} m={m:<5} T={T}  oracle {oracle:.3g}  "
                          f"default ({row['brace_default_release']}) "
                          f"x{row['brace_default_over_oracle']:.2f}  "
                          f"fraction x{row['brace_fraction_over_oracle']:.2f}  "
                          f"gates x{row['brace_gates_over_oracle']:.2f}  "
                          f"count x{row['brace_count_over_oracle']:.2f}  "
                          f"(vs global: default {row['brace_default_over_global']:.3f}, "
                          f"gates {row['brace_gates_over_global']:.3f}, count "
                          f"{row['brace_count_over_global']:.3f})", flush=True)
    return rows


def summarise(rows: list[dict]) -> dict:
    eligible = [r for r in rows if r["gate"] >= r["m_min"]]
    out = {}
    for name in ("brace_default", "brace_fraction", "brace_gates", "brace_count"):
        out[name] = dict(
            worst_over_oracle_where_m_ge_m_min=max((r[f"{name}_over_oracle"] for r in eligible),
                                                   default=math.nan),
            cells_within_2x_oracle=sum(r[f"{name}_over_oracle"] <= 2 for r in eligible),
            eligible_cells=len(eligible),
            worst_over_global=max(r[f"{name}_over_global"] for r in rows),
        )
    return out


def figure(rows: list[dict], path: Path) -> None:
    plt = pyplot()
    dims = sorted({r["dim"] for r in rows})
    fig, axes = plt.subplots(1, len(dims), figsize=(4.2 * len(dims), 3.6), squeeze=False)
    for ax, d in zip(axes[0], dims, strict=True):
        for m, c in zip(sorted({r["gate"] for r in rows}), ("C0", "C1", "C2", "C3"),
                        strict=False):
            sel = sorted((r for r in rows if r["dim"] == d and r["gate"] == m
                          and r["steps"] == max(x["steps"] for x in rows if x["dim"] == d)),
                         key=lambda r: r["epsilon"])
            e = [r["epsilon"] for r in sel]
            ax.plot(e, [r["brace_default_over_oracle"] for r in sel], "-o", color=c, ms=3,
                    label=f"default (auto), m={m}")
            ax.plot(e, [r["brace_gates_over_oracle"] for r in sel], "--", color=c)
            ax.plot(e, [r["brace_fraction_over_oracle"] for r in sel], ":", color=c)
        ax.axhline(2, color="k", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("ε")
        ax.set_title(f"d = {d} (dashed: gates rule, dotted: fraction-0.9 rule)", fontsize=9)
    axes[0][0].set_ylabel("step-1 noise std / oracle")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)


def main() -> None:
    p = _bench.parser(__doc__, quick="a small subset of the grid", threads=False, json=False)
    p.add_argument("--medium", action="store_true", help="the full grid at T = 3 only")
    p.add_argument("--draws", type=int, default=40, help="releases per cell (default 40)")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    p.add_argument("--out", type=Path, default=Path("runs/bench_utility"),
                   help="output directory (default runs/bench_utility)")
    p.add_argument("--threads", type=int, default=1, help="BLAS threads (default 1)")
    a = p.parse_args()
    grid = QUICK if a.quick else MEDIUM if a.medium else FULL
    a.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with threadpool_limits(a.threads):
        rows = run(grid, a.draws, a.seed)
    summary = summarise(rows)
    _bench.save_json(a.out / "utility.json", {
        "benchmark": "bench_utility", **_bench.environment(),
        "config": {"grid": grid, "draws": a.draws, "seed": a.seed, "n": N, "radius": R,
                   "delta": DELTA, "threads": a.threads},
        "rows": rows, "summary": summary, "wall_time_s": time.perf_counter() - t0})
    figure(rows, a.out / "utility.png")
    print(summary)
    print(f"wrote {a.out / 'utility.png'}", file=sys.stderr)


if __name__ == "__main__":
    main()
