"""Statistics of the audit: Clopper–Pearson bounds, the ε lower bound, thresholds."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._validation import check_int_at_least, check_positive

__all__ = [
    "clopper_pearson_upper",
    "epsilon_lower_bound",
    "error_counts",
    "certify_thresholds",
    "max_certifiable_epsilon",
]

def clopper_pearson_upper(k: Any, n: Any, alpha: float) -> np.ndarray:
    """One-sided ``1 − α`` Clopper–Pearson upper confidence bound on a binomial rate.

    ``U(k, n) = Beta⁻¹(1 − α; k + 1, n − k)`` for ``k < n`` and ``1`` for ``k = n``
    (Clopper & Pearson 1934): ``P_p(U(K, n) ≥ p) ≥ 1 − α`` for every ``p`` when
    ``K ~ Bin(n, p)``. For ``k = 0`` this is ``1 − α^{1/n}``. Vectorised over ``k, n``.

    >>> round(float(clopper_pearson_upper(0, 10, 0.05)), 6)
    0.258866
    """
    a = _check_alpha(alpha)
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    if np.any(~np.isfinite(k)) or np.any(~np.isfinite(n)):
        raise ValueError(f"clopper_pearson_upper: k and n must be finite; got k={k}, n={n}.")
    if np.any(n < 1) or np.any(k < 0) or np.any(k > n):
        raise ValueError(f"clopper_pearson_upper needs 0 <= k <= n and n >= 1; got k={k}, n={n}.")
    full = k >= n
    from scipy import stats  # lazy: scipy.stats is most of the CLI's start-up

    out = stats.beta.ppf(1.0 - a, k + 1.0, np.where(full, 1.0, n - k))
    return np.where(full, 1.0, out)


def epsilon_lower_bound(fpr_upper: Any, fnr_upper: Any, delta: float) -> np.ndarray:
    """``max{0, ln((1 − δ − FNR_U)/FPR_U), ln((1 − δ − FPR_U)/FNR_U)}`` elementwise.

    Conventions: a term whose numerator is ``≤ 0`` contributes nothing (it certifies no
    ε); ``FPR_U = 0`` (or ``FNR_U = 0``) with a positive numerator gives ``+inf`` (only
    possible for exact rates, never for Clopper–Pearson bounds, which are ``> 0``).

    >>> round(float(epsilon_lower_bound(0.01, 0.5, 0.0)), 6)  # ln(0.5/0.01) = ln 50
    3.912023
    """
    dl = float(delta)
    if not 0.0 <= dl < 1.0:
        raise ValueError(f"delta must lie in [0, 1). Found {delta}.")
    p = np.asarray(fpr_upper, dtype=np.float64)
    f = np.asarray(fnr_upper, dtype=np.float64)
    if np.any(~((p >= 0) & (p <= 1))) or np.any(~((f >= 0) & (f <= 1))):
        raise ValueError(
            "epsilon_lower_bound: the rates fpr_upper and fnr_upper must lie in [0, 1]; got "
            f"fpr_upper={p}, fnr_upper={f}."
        )
    return np.maximum(_log_ratio(1.0 - dl - f, p), _log_ratio(1.0 - dl - p, f))


def max_certifiable_epsilon(n_runs: int, alpha: float, n_bounds: int, delta: float) -> float:
    """The largest ε_lb that ``n_runs`` per side can certify (zero errors on both sides)
    with ``n_bounds`` Bonferroni-corrected bounds at total level ``alpha``:
    ``ln((1 − δ − U)/U)``, ``U = 1 − (α/n_bounds)^{1/n}``."""
    n = check_int_at_least("n_runs", n_runs, 1)
    nb = check_int_at_least("n_bounds", n_bounds, 1)
    u = float(clopper_pearson_upper(0, n, _check_alpha(alpha) / nb))
    return float(epsilon_lower_bound(u, u, delta))


def _runs_to_certify(p_fp: float, p_fn: float, claim: float, alpha: float, n_bounds: int,
                     delta: float, *, start: int = 1, limit: int = 10**9) -> int | None:
    """Smallest ``n ≥ start`` (to 1 %) whose Clopper–Pearson bounds at error counts
    ``⌈p·n⌉`` certify ``ε_lb > claim``; None if the rates cannot or ``n > limit``."""
    if float(epsilon_lower_bound(p_fp, p_fn, delta)) <= claim:
        return None
    a = _check_alpha(alpha) / n_bounds

    def ok(n: int) -> bool:
        cp = clopper_pearson_upper([math.ceil(p_fp * n), math.ceil(p_fn * n)], n, a)
        return float(epsilon_lower_bound(cp[0], cp[1], delta)) > claim

    lo, hi = max(1, start), max(2, start)
    while not ok(hi):
        lo, hi = hi, hi * 2
        if hi > limit:
            return None
    while hi - lo > max(1, hi // 100):
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _log_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``max(0, ln(num/den))`` with ``num ≤ 0 → 0`` and ``den = 0 < num → inf``."""
    num, den = np.broadcast_arrays(num, den)
    out = np.zeros(num.shape)
    pos = num > 0
    zero_den = pos & (den <= 0)
    ok = pos & ~zero_den
    out[ok] = np.maximum(0.0, np.log(num[ok]) - np.log(den[ok]))
    out[zero_den] = math.inf
    return out


def error_counts(
    stat_d: Any, stat_dprime: Any, thresholds: Any
) -> tuple[np.ndarray, np.ndarray]:
    """Errors of the tests "say D' iff S > τ": ``FP(τ) = #{S_D > τ}``, ``FN(τ) = #{S_D' ≤ τ}``."""
    a = np.sort(np.asarray(stat_d, dtype=np.float64).ravel())
    b = np.sort(np.asarray(stat_dprime, dtype=np.float64).ravel())
    tau = np.asarray(thresholds, dtype=np.float64)
    fp = a.size - np.searchsorted(a, tau, side="right")
    fn = np.searchsorted(b, tau, side="right")
    return fp.astype(np.int64), fn.astype(np.int64)


def certify_thresholds(
    stat_d: Any,
    stat_dprime: Any,
    thresholds: Any,
    *,
    delta: float,
    alpha: float,
    n_bounds: int,
) -> dict[str, np.ndarray]:
    """Counts, Clopper–Pearson bounds and ``ε_lb`` per threshold.

    Each of the ``2·len(thresholds)`` rates in this call, and of any other call the
    caller combines with it, gets level ``α / n_bounds`` (Bonferroni: ``n_bounds`` is the
    total number of one-sided bounds, i.e. ``2 × thresholds × pairs``), so every bound
    holds simultaneously with probability ``≥ 1 − α``.
    """
    nb = check_int_at_least("n_bounds", n_bounds, 1)
    a = _check_alpha(alpha) / nb
    s0 = np.asarray(stat_d, dtype=np.float64).ravel()
    s1 = np.asarray(stat_dprime, dtype=np.float64).ravel()
    if s0.size == 0 or s1.size == 0:
        raise ValueError(
            "certify_thresholds needs at least one run on each bank; got "
            f"{s0.size} value(s) in stat_d and {s1.size} in stat_dprime."
        )
    if np.any(np.isnan(s0)) or np.any(np.isnan(s1)):
        raise ValueError(
            "stat_d and stat_dprime must not contain NaN; got "
            f"{int(np.isnan(s0).sum())} and {int(np.isnan(s1).sum())} NaN value(s)."
        )
    tau = np.atleast_1d(np.asarray(thresholds, dtype=np.float64))
    fp, fn = error_counts(s0, s1, tau)
    fpr_u = clopper_pearson_upper(fp, s0.size, a)
    fnr_u = clopper_pearson_upper(fn, s1.size, a)
    return {
        "thresholds": tau,
        "false_positives": fp,
        "false_negatives": fn,
        "fpr_upper": fpr_u,
        "fnr_upper": fnr_u,
        "epsilon_lb": epsilon_lower_bound(fpr_u, fnr_u, delta),
    }


def _check_alpha(alpha: Any) -> float:
    a = check_positive("alpha", alpha)
    if not a < 1.0:
        raise ValueError(f"alpha must lie in (0, 1). Found {a}.")
    return a


def _threshold_grid(s0: np.ndarray, s1: np.ndarray, n_levels: int = 80) -> np.ndarray:
    """Candidate thresholds spread log-uniformly in tail mass: upper quantiles of ``S_D``
    (few false positives) and lower quantiles of ``S_{D'}`` (few false negatives)."""
    n = min(s0.size, s1.size)
    p = np.unique(np.concatenate([np.geomspace(1.0 / n, 0.5, n_levels), [0.5]]))
    grid = np.concatenate([np.quantile(s0, 1.0 - p), np.quantile(s1, p)])
    grid = grid[np.isfinite(grid)]
    return np.unique(grid) if grid.size else np.zeros(1)


def _choose_thresholds(s0, s1, k, *, delta, alpha, n_bounds) -> tuple[np.ndarray, float]:
    """Best ``k`` thresholds on pilot data (half per direction), and the pilot ε_lb."""
    grid = _threshold_grid(s0, s1)
    res = certify_thresholds(s0, s1, grid, delta=delta, alpha=alpha, n_bounds=n_bounds)
    fpr_u, fnr_u = res["fpr_upper"], res["fnr_upper"]
    e1 = _log_ratio(1.0 - delta - fnr_u, fpr_u)  # few false positives
    e2 = _log_ratio(1.0 - delta - fpr_u, fnr_u)  # few false negatives
    chosen: list[float] = []
    order1, order2 = np.argsort(-e1, kind="stable"), np.argsort(-e2, kind="stable")
    i1 = i2 = 0
    while len(chosen) < min(k, grid.size):
        if (len(chosen) % 2 == 0 and i1 < grid.size) or i2 >= grid.size:
            tau = grid[order1[i1]]
            i1 += 1
        else:
            tau = grid[order2[i2]]
            i2 += 1
        if tau not in chosen:
            chosen.append(float(tau))
    return np.array(sorted(chosen)), float(res["epsilon_lb"].max())
