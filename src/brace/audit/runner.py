"""The audit: screen, pilot and fresh runs on a pair of banks, and the certified bound."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .._validation import check_bank, check_rng
from ..memory import LSRMemory
from .config import AuditConfig, _single_query
from .density import _log_density, _sample, _Setup, _setup
from .local import local_pair
from .pairs import _given_pair, _replaced, candidate_pairs
from .result import AuditResult, PairCertificate
from .stats import _choose_thresholds, _threshold_grid, certify_thresholds, error_counts

__all__ = ["audit"]

StatisticFn = Callable[[np.ndarray], Any]


def _validate_statistic(vals: Any, n: int) -> np.ndarray:
    v = np.asarray(vals)
    if v.dtype.kind not in "iuf":
        raise TypeError(f"statistic must return real numbers; got dtype {v.dtype}.")
    v = v.astype(np.float64).reshape(-1)
    if v.size != n:
        raise ValueError(f"statistic must return one value per run ({n}); got {v.size}.")
    if np.any(np.isnan(v)):
        raise ValueError(
            f"statistic must return numbers, not NaN; got {int(np.isnan(v).sum())} NaN "
            f"value(s) in {n} runs. Fix the statistic (e.g. guard its logarithms)."
        )
    return v


def _stat(setup: _Setup, mem_d: LSRMemory, mem_p: LSRMemory, outputs: np.ndarray,
          statistic: StatisticFn | None, cache_d: np.ndarray | None = None) -> np.ndarray:
    """The statistic of each run: ``statistic(outputs)``, or the exact LLR
    ``log p_{D'} − log p_D`` (``cache_d``: ``log p_D(outputs)`` if already computed)."""
    if statistic is not None:
        return _validate_statistic(statistic(outputs.copy()), outputs.shape[0])
    ld = _log_density(mem_d, setup, outputs) if cache_d is None else cache_d
    return _log_density(mem_p, setup, outputs) - ld


def audit(
    bank: Any,
    query: Any,
    config: AuditConfig = AuditConfig(),
    *,
    replacement: tuple[int, Any] | None = None,
    statistic: StatisticFn | None = None,
    progress: Callable[[str], None] | None = None,
) -> AuditResult:
    """Lower-bound the ε of a mechanism on a bank and query (module docstring).

    Parameters
    ----------
    bank : array_like (n, d)
        ``D``.
    query : array_like (d,) or (1, d)
        The public query ``q``.
    config : AuditConfig
        Mechanism and sample sizes.
    replacement : (row, value), optional
        Audit this neighbour only (``D'`` = ``D`` with ``D[row] = value``); otherwise the
        pair finder proposes candidates and the pilot runs choose (or, with
        ``config.pair`` ``"far"``/``"near"``, :func:`brace.audit.local.local_pair` gives
        the one neighbour).
    statistic : callable, optional
        ``outputs (N, T, d) -> (N,)`` real scores; default: the exact log-likelihood ratio.
    progress : callable, optional
        Called with short status strings.

    Returns
    -------
    AuditResult
    """
    t0 = time.perf_counter()
    cfg = config.validated()
    X = check_bank(bank)
    n, d = X.shape
    q = _single_query(query, d)
    if replacement is not None and cfg.pair != "search":
        raise ValueError(f"give replacement=(row, value) or config.pair={cfg.pair!r}, not both.")
    if statistic is not None and not callable(statistic):
        raise TypeError(f"statistic must be callable or None; got {type(statistic).__name__}.")
    setup = _setup(cfg, q)
    say = progress or (lambda _msg: None)
    ss = np.random.SeedSequence(cfg.seed)
    s_cand, s_screen, s_pilot, s_fresh = ss.spawn(4)
    D = LSRMemory(X, radius=cfg.radius)

    # --- candidates and screening -------------------------------------------------
    if replacement is not None or cfg.pair != "search":
        pairs = [_given_pair(X, q[0], cfg.radius, replacement) if replacement is not None
                 else local_pair(X, q, cfg)]
        screen_scores = [math.nan]
        n_screen_used = 0
    else:
        screen_streams = s_screen.spawn(1 + cfg.max_candidates)
        out_d = _sample(D, setup, cfg.n_screen, check_rng(screen_streams[0]))
        gen_cand = check_rng(s_cand)
        released = None
        if cfg.method != "endpoint" and cfg.steps > 1:
            pick = gen_cand.choice(cfg.n_screen, 3, replace=False)
            released = out_d[pick, : cfg.steps - 1, :d].reshape(-1, d)
        pairs = candidate_pairs(X, q, cfg, released=released, rng=gen_cand)
        if not pairs:
            raise ValueError(
                "the pair finder found no neighbouring bank that differs from D; pass "
                "replacement=(row, value) to audit a given neighbour."
            )
        say(f"screening {len(pairs)} candidate pairs x {cfg.n_screen} runs")
        ld = None if statistic is not None else _log_density(D, setup, out_d)
        screen_scores = []
        for i, p in enumerate(pairs):
            Dp = LSRMemory(_replaced(X, p), radius=cfg.radius)
            out_p = _sample(Dp, setup, cfg.n_screen,
                            check_rng(screen_streams[0 if cfg.coupled else 1 + i]))
            a = _stat(setup, D, Dp, out_d, statistic, ld)
            b = _stat(setup, D, Dp, out_p, statistic)
            screen_scores.append(_screen_score(a, b, llr=statistic is None))
        n_screen_used = cfg.n_screen

    # --- pilot: choose the pair(s) and thresholds ---------------------------------
    order = np.argsort(-np.nan_to_num(np.array(screen_scores), nan=0.0), kind="stable")
    finalists = [int(i) for i in order[: cfg.n_finalists]]
    n_cert = min(cfg.n_certify, len(finalists))
    n_bounds = 2 * cfg.n_thresholds * n_cert
    say(f"pilot: {len(finalists)} finalist pair(s) x {cfg.n_pilot} runs")
    pilot_streams = s_pilot.spawn(1 + len(finalists))
    out_d = _sample(D, setup, cfg.n_pilot, check_rng(pilot_streams[0]))
    ld = None if statistic is not None else _log_density(D, setup, out_d)
    pilot = []
    for j, i in enumerate(finalists):
        Dp = LSRMemory(_replaced(X, pairs[i]), radius=cfg.radius)
        out_p = _sample(Dp, setup, cfg.n_pilot,
                        check_rng(pilot_streams[0 if cfg.coupled else 1 + j]))
        a = _stat(setup, D, Dp, out_d, statistic, ld)
        b = _stat(setup, D, Dp, out_p, statistic)
        tau, eps_pilot = _choose_thresholds(
            a, b, cfg.n_thresholds, delta=cfg.delta, alpha=cfg.alpha, n_bounds=n_bounds
        )
        pilot.append((eps_pilot, -j, i, tau))
    pilot.sort(reverse=True)
    chosen = pilot[:n_cert]

    # --- fresh runs: count and certify ---------------------------------------------
    say(f"fresh: {n_cert} pair(s) x {cfg.n_runs} runs per bank")
    fresh_streams = s_fresh.spawn(1 + n_cert)
    out_d = _sample(D, setup, cfg.n_runs, check_rng(fresh_streams[0]))
    ld = None if statistic is not None else _log_density(D, setup, out_d)
    certs = []
    for j, (eps_pilot, _, i, tau) in enumerate(chosen):
        Dp = LSRMemory(_replaced(X, pairs[i]), radius=cfg.radius)
        out_p = _sample(Dp, setup, cfg.n_runs,
                        check_rng(fresh_streams[0 if cfg.coupled else 1 + j]))
        a = _stat(setup, D, Dp, out_d, statistic, ld)
        b = _stat(setup, D, Dp, out_p, statistic)
        res = certify_thresholds(a, b, tau, delta=cfg.delta, alpha=cfg.alpha, n_bounds=n_bounds)
        certs.append(PairCertificate(
            pair=pairs[i], thresholds=res["thresholds"],
            false_positives=res["false_positives"], false_negatives=res["false_negatives"],
            fpr_upper=res["fpr_upper"], fnr_upper=res["fnr_upper"],
            epsilon_per_threshold=res["epsilon_lb"], pilot_epsilon_lb=eps_pilot,
            screen_score=float(screen_scores[i]),
            differing_runs=_differing_runs(out_d, out_p) if cfg.coupled else None,
        ))
    eps_lb = max(c.epsilon_lb for c in certs)
    seeds = {
        "seed": cfg.seed,
        "entropy": ss.entropy,
        "streams": "SeedSequence(entropy).spawn(4) = [candidates, screen, pilot, fresh]; "
        "each stage .spawn(1 + pairs): [0] bank D, [1 + i] the i-th D' of that stage"
        + ("; coupled: every D' reuses [0]" if cfg.coupled else ""),
    }
    return AuditResult(
        config=cfg, label=cfg.label, claimed_epsilon=cfg.epsilon, delta=cfg.delta,
        epsilon_lb=float(eps_lb), alpha=cfg.alpha, certified=tuple(certs), n_runs=cfg.n_runs,
        n_pilot=cfg.n_pilot, n_screen=n_screen_used, n_candidates=len(pairs),
        n_bounds=n_bounds,
        statistic="log-likelihood ratio" if statistic is None
        else getattr(statistic, "__name__", "user statistic"),
        rho_per_step=setup.spent.rho_per_step, gamma=setup.spent.gamma, seeds=seeds,
        wall_time_s=time.perf_counter() - t0, charged_epsilon=cfg.charged_epsilon,
    )


def _differing_runs(out_d: np.ndarray, out_p: np.ndarray) -> int:
    """Coupled runs whose releases on ``D`` and ``D'`` differ in any bit."""
    a = np.ascontiguousarray(out_d, dtype=np.float64).view(np.uint64)
    b = np.ascontiguousarray(out_p, dtype=np.float64).view(np.uint64)
    return int(np.count_nonzero(np.any((a != b).reshape(a.shape[0], -1), axis=1)))


def _screen_score(a: np.ndarray, b: np.ndarray, *, llr: bool) -> float:
    """Ranking score of a candidate: the estimated Jeffreys divergence
    ``E_{D'}[S] − E_D[S]`` for the LLR; for a user statistic, the largest smoothed
    log ratio of tail frequencies over a threshold grid."""
    if llr:
        return float(np.mean(b) - np.mean(a))
    grid = _threshold_grid(a, b, 30)
    fp, fn = error_counts(a, b, grid)
    p0 = (fp + 0.5) / (a.size + 1.0)
    p1 = (fn + 0.5) / (b.size + 1.0)
    return float(np.max(np.maximum(np.log((1 - p1) / p0), np.log((1 - p0) / p1))))
