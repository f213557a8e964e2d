"""The audit report: built-in banks and mechanisms, run and formatted."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass

import numpy as np

from .._validation import check_int_at_least, check_rng
from ..mechanisms import DEFAULT_KAPPA
from ..policy import choose_gamma_for_gates
from .config import AuditConfig
from .local import local_cases
from .runner import audit

__all__ = ["ReportConfig", "report_bank", "report_cases", "report", "format_report"]

@dataclass(frozen=True)
class ReportConfig:
    """The standard audit report: BRACE (κ ∈ {0, 128}; the gate-size γ; the count release),
    global, endpoint at ε ∈ {1, 4} and the naive baseline, on small banks in d ∈ {1, 2},
    the count release and the smooth release (κ = 0) with secure noise at ε = 4, plus
    local accounting's far and near pairs (``local_pairs``), one cell round and one
    Voronoi round (no public seeds) of the synopsis (``synopsis``) and broken-noise
    self-checks (global and the count release, std halved; secure global with a grid
    2^23× coarser than accounted)."""

    n_runs: int = 100_000
    steps: int = 2
    delta: float = 1e-5
    radius: float = 0.5
    epsilons: tuple = (1.0, 4.0)
    dims: tuple = (1, 2)
    bank_sizes: tuple = (24, 40)  # n for d = 1, 2
    n_screen: int = 1_000
    alpha: float = 0.05
    seed: int = 0
    data_seed: int = 7
    local_pairs: bool = True  # the far- and near-pair rows (docs/audit.md §5.1)
    synopsis: bool = True  # the synopsis's cell-round and Voronoi rows (privacy-accounting §14-15)


def report_bank(n: int, d: int, radius: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A small bank, uniform on ``[-L, L]^d`` (about one memory per gate), and a public
    query whose gate holds exactly one memory, near its boundary (distance ≥ 0.9 r).

    There every pair that matters exists: moving that memory to the far side of the ball
    shifts the gate mean by almost ``2r`` (the global sensitivity), and moving another
    memory just inside makes the gate count go ``1 ↔ 2``, where the naive baseline's
    noise scale jumps between ``2r/1`` and ``2r/2``.
    """
    rng = check_rng(seed)
    half = {1: 0.5 * n * radius, 2: 0.9 * math.sqrt(n) * radius}.get(d, 2.0)
    X = rng.uniform(-half, half, (n, d))
    for c in rng.uniform(-half, half, (20_000, d)):
        dist = np.sqrt(np.sum((X - c) ** 2, axis=1))
        if int((dist <= radius).sum()) == 1 and dist[dist <= radius][0] >= 0.9 * radius:
            return X, c
    raise RuntimeError("report_bank: no query with a one-memory gate")  # pragma: no cover


def report_cases(rc: ReportConfig) -> list[tuple[int, AuditConfig]]:
    """(d, config) of every row of the report."""
    cases = []
    for i, d in enumerate(rc.dims):
        n = rc.bank_sizes[i] if i < len(rc.bank_sizes) else rc.bank_sizes[-1]
        for eps in rc.epsilons:
            gates = choose_gamma_for_gates(eps, rc.delta, rc.steps, dim=d, n=n)
            for method, kappa, extra in (
                ("brace", 0.0, {}), ("brace", DEFAULT_KAPPA, {}),
                ("brace", DEFAULT_KAPPA, {"gamma": gates}),
                ("brace", DEFAULT_KAPPA, {"release": "count"}),
                ("global", 0.0, {}), ("endpoint", 0.0, {}), ("naive", 0.0, {}),
            ):
                cases.append((d, AuditConfig(
                    method=method, epsilon=eps, delta=rc.delta, steps=rc.steps,
                    radius=rc.radius, kappa=kappa, n_runs=rc.n_runs, n_screen=rc.n_screen,
                    alpha=rc.alpha, seed=rc.seed, **extra,
                )))
    if rc.local_pairs:
        cases += local_cases(rc)
    # self-checks: the same audit must catch a mechanism whose noise std is halved
    for extra in ({"method": "global"}, {"method": "brace", "release": "count"}):
        cases.append((rc.dims[0], AuditConfig(
            epsilon=min(rc.epsilons), delta=rc.delta, steps=1, radius=rc.radius,
            noise_scale_factor=0.5, n_runs=rc.n_runs, n_screen=rc.n_screen,
            alpha=rc.alpha, seed=rc.seed, **extra,
        )))
    # secure noise (docs/privacy-accounting.md §13), the default without a seed: the count
    # release and the smooth release with the correction on (Theorem 11), at the largest ε
    for d in rc.dims:
        for extra in ({"release": "count"}, {"kappa": 0.0}):
            cases.append((d, AuditConfig(
                method="brace", noise="secure", epsilon=max(rc.epsilons),
                delta=rc.delta, steps=rc.steps, radius=rc.radius, n_runs=rc.n_runs,
                n_screen=rc.n_screen, alpha=rc.alpha, seed=rc.seed, **extra,
            )))
    # secure mode's self-check: a pre-noise point rounded to a grid 2^23 times coarser
    # than the sensitivity accounts for (about 8 noise stds) must be caught
    cases.append((rc.dims[0], AuditConfig(
        method="global", noise="secure", grid_factor=SECURE_BROKEN_GRID,
        epsilon=min(rc.epsilons), delta=rc.delta, steps=1, radius=rc.radius,
        n_runs=rc.n_runs, n_screen=rc.n_screen, alpha=rc.alpha, seed=rc.seed,
    )))
    return cases


SECURE_BROKEN_GRID = 2**23  # the secure self-check's grid, in units of the accounted grid


def report(rc: ReportConfig = ReportConfig(), *, progress: bool = True) -> dict:
    """Run every case of the report; return a JSON-able dict (see :func:`format_report`)."""
    check_int_at_least("n_runs", rc.n_runs, 10)
    t0 = time.perf_counter()
    rows = []
    banks = {}
    for i, d in enumerate(rc.dims):
        n = rc.bank_sizes[i] if i < len(rc.bank_sizes) else rc.bank_sizes[-1]
        banks[d] = report_bank(n, d, rc.radius, rc.data_seed + d)
    for d, cfg in report_cases(rc):
        X, q = banks[d]
        if progress:
            print(f"[audit] {cfg.label}, eps={cfg.epsilon:g}, d={d}, T={cfg.steps} ...",
                  file=sys.stderr, flush=True)
        res = audit(X, q, cfg)
        row = res.to_dict()
        row.update({"d": d, "n": int(X.shape[0]), "steps": cfg.steps})
        rows.append(row)
    if rc.synopsis:
        from .synopsis import moments_row, pairs_row, synopsis_row, voronoi_row

        d = max(rc.dims)
        for what, row_fn in (("cell round", synopsis_row), ("Voronoi round", voronoi_row),
                             ("second moments", moments_row), ("pair release", pairs_row)):
            if progress:
                print(f"[audit] synopsis {what}, eps={min(rc.epsilons):g}, d={d} ...",
                      file=sys.stderr, flush=True)
            rows.append(row_fn(*banks[d], epsilon=min(rc.epsilons), delta=rc.delta,
                               radius=rc.radius, n_runs=rc.n_runs, alpha=rc.alpha,
                               seed=rc.seed))
    private_ok = all(r["epsilon_lb"] <= r["charged_epsilon"] for r in rows
                     if r["verdict"] in ("pass", "VIOLATION"))
    caught = all(r["exceeds_claim"] for r in rows
                 if r["verdict"] in ("caught", "NOT CAUGHT", "UNDERPOWERED"))
    real_failure = not private_ok or any(r["verdict"] == "NOT CAUGHT" for r in rows)
    under = [r for r in rows if r["verdict"] == "UNDERPOWERED"]
    overall = "FAIL" if real_failure else "UNDERPOWERED" if under else "PASS"
    from .._meta import metadata

    return {
        **metadata(rc),
        "banks": {str(d): {"bank": X.tolist(), "query": q.tolist()} for d, (X, q) in
                  banks.items()},
        "rows": rows,
        "private_mechanisms_pass": private_ok,
        "naive_and_broken_caught": caught,
        "passed": private_ok and caught,
        "overall": overall,
        "runs_needed": max((r["runs_needed"] or 0 for r in under), default=None) or None,
        "wall_time_s": time.perf_counter() - t0,
    }


def format_report(rep: dict) -> str:
    """The report as a text table (claimed ε vs ε_lb)."""
    cfg = rep["config"]
    head = (f"{'mechanism':<52} {'d':>1} {'n':>3} {'T':>1} {'claimed eps':>11} "
            f"{'eps_lb':>7} {'runs/side':>9}  {'verdict':<10} pair")
    lines = [
        f"Privacy audit: delta = {cfg['delta']:g}, confidence {1 - cfg['alpha']:g} per row, "
        f"r = {cfg['radius']:g}; statistic: exact log-likelihood ratio of the unprojected "
        "release",
        head,
        "-" * len(head),
    ]
    for r in rep["rows"]:
        p = r["pair"]
        lines.append(
            f"{r['label']:<52} {r['d']:>1} {r['n']:>3} {r['steps']:>1} "
            f"{r['claimed_epsilon']:>11g} {r['epsilon_lb']:>7.3f} {r['n_runs_per_side']:>9d}  "
            f"{r['verdict']:<10} {p['kind']} at {p['centre']}, |I(q)| "
            f"{p['gate_q'][0]}->{p['gate_q'][1]}"
        )
    lines += [
        "",
        f"private mechanisms: eps_lb <= claimed in every row: {rep['private_mechanisms_pass']}",
        f"naive (NOT DP) and broken noise caught (eps_lb > claimed): "
        f"{rep['naive_and_broken_caught']}",
    ]
    far = [r for r in rep["rows"] if r["config"].get("pair") == "far"]
    if far:
        lines.append(
            "local accounting: far pairs (outside every footprint) give eps_lb = 0: "
            f"{all(r['epsilon_lb'] == 0 for r in far)}; coupled runs whose releases differ: "
            + ", ".join(f"{r['differing_runs']}/{r['n_runs_per_side']}" for r in far)
        )
    overall = rep.get("overall", "PASS" if rep["passed"] else "FAIL")
    if any(r["verdict"] == "UNDERPOWERED" for r in rep["rows"]):
        lines.append(
            "UNDERPOWERED rows: too few runs to certify that the claim is exceeded (their "
            "observed error rates exceed it, or no outcome of so few runs could)"
            + (f"; about --runs {rep['runs_needed']} would certify it"
               if rep.get("runs_needed") else "; use many more --runs")
            + " (this is not a failure of the mechanisms)."
        )
    lines.append(f"overall: {overall}; wall time {rep['wall_time_s']:.0f} s")
    return "\n".join(lines)
