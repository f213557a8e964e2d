"""The Rényi-DP curve of one smooth-sensitivity Gaussian step and its conversion to (ε, δ).

Notation (``docs/spec.md`` §2, §4). A step releases ``Q + ξ`` with ``ξ ~ N(0, s² I_d)`` and
``s = Δ̄ / sqrt(2ρ)``, where ``Δ̄`` bounds the sensitivity of ``Q``. With a fixed ``Δ̄``
(γ = 0) this is the Gaussian mechanism, ρ-zCDP (Bun & Steinke 2016, Prop. 1.6) and
``(α, αρ)``-RDP for every α > 1 (Mironov 2017, §VI, Table II). With a smooth-sensitivity
bound (Nissim, Raskhodnikova & Smith 2007), ``Δ̄`` depends on the data with
``e^{-γ} ≤ Δ̄(D)/Δ̄(D') ≤ e^{γ}`` and ``‖Q(D) − Q(D')‖ ≤ min(Δ̄(D), Δ̄(D'))`` for neighbours,
and one step is ``(α, ε_step(α))``-RDP with (``docs/privacy-accounting.md``, Lemma 2)::

    ε_step(α) = sup_{v ∈ [e^{-2γ}, e^{2γ}]} f_α(v),
    f_α(v) = αρ·min(v, 1)/(α − (α−1)v) − d/(2(α−1)) · (log(α − (α−1)v) + (α−1) log v),

which is ``+∞`` when ``α ≥ e^{2γ}/(e^{2γ} − 1)`` and equals ``αρ`` when γ = 0. The
supremum is attained at ``v = e^{2γ}`` (Lemma 3 of the docs), so with
``h = α − (α−1)e^{2γ} > 0``::

    ε_step(α) = αρ/h − d·log(h)/(2(α−1)) − dγ.

The code takes the maximum over every candidate — both endpoints, the kink ``v = 1`` and
the stationary point of each smooth piece — so it is exact independently of Lemma 3
(which the tests check).

Conversion to (ε, δ): Balle et al. 2020, Thm 21 / Canonne, Kamath & Steinke 2020,
Prop. 12 (arXiv 2004.00010 v4)::

    ε(δ) = min_{α > 1} [ ε_RDP(α) + log((α−1)/α) − (log δ + log α)/(α − 1) ],

minimised here over continuous α (a coarse log grid brackets the optimum, then a
vectorised refinement of the bracket and a parabolic step). The conversion at *any* α is
a valid bound, so inexact minimisation can only over-state ε, never under-state it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np

from .._validation import check_delta, check_int_at_least, check_nonnegative
from .primitives import _check_alpha

__all__ = ["smooth_gaussian_rdp", "max_rdp_order", "rdp_to_epsilon"]

_X_MIN = 1e-6  # smallest α − 1 considered by the conversion (the bound is useless there)
_X_MAX = 1e12  # largest α − 1 considered when every order is finite (γ = 0)
_REFINE_POINTS = 129  # orders of the pass across the grid's bracket (its spacing ÷ 64)


def max_rdp_order(gamma: float) -> float:
    """Orders α of a smooth step are finite iff ``α < e^{2γ}/(e^{2γ} − 1)`` (``+∞`` at γ = 0)."""
    g = check_nonnegative("gamma", gamma)
    return _alpha_max(g)


def _alpha_max(gamma: float) -> float:
    if gamma == 0.0:
        return math.inf
    return 1.0 + 1.0 / math.expm1(2.0 * gamma)


def _f_alpha(a: np.ndarray, rho: float, dim: int, log_v: np.ndarray) -> np.ndarray:
    """``f_α(v)`` of the module docstring at ``v = exp(log_v)``; ``+∞`` where ``h ≤ 0``.

    Written with ``log1p``/``expm1`` so small γ (``v ≈ 1``) loses no precision.
    """
    b = a - 1.0
    vm1 = np.expm1(log_v)  # v − 1
    h = 1.0 - b * vm1  # α − (α−1)v
    ok = h > 0.0
    hs = np.where(ok, h, 1.0)
    mean_term = a * rho * np.minimum(vm1 + 1.0, 1.0) / hs
    var_term = -dim / (2.0 * b) * (np.log1p(np.where(ok, -b * vm1, 0.0)) + b * log_v)
    return np.where(ok, mean_term + var_term, np.inf)


def _smooth_step_rdp(a: np.ndarray, rho: float, gamma: float, dim: int) -> np.ndarray:
    """Exact ``ε_step(α)`` (no validation; ``a`` an array of orders > 1, ρ ≥ 0).

    f_α is continuous on [e^{-2γ}, e^{2γ}] and differentiable except at v = 1, so its
    maximum is attained at an endpoint, at v = 1, or at a stationary point of one of the
    two pieces. On v ≥ 1 the derivative is positive (no stationary point); on v ≤ 1 the
    stationarity condition is the quadratic ``d(α−1)/2·v² − B v + dα/2 = 0`` with
    ``B = αρ + d(2α−1)/2``, whose only root in (0, 1) is
    ``v_* = dα / (B + sqrt(B² − d²α(α−1)))`` (a minimum, Lemma 3). We take the max
    over all candidates, so the result is exact whatever the sign analysis says; Lemma 3
    shows the winner is always ``v = e^{2γ}``.
    """
    a = np.asarray(a, dtype=np.float64)
    if gamma == 0.0:
        return a * rho
    two_g = 2.0 * gamma
    lo = np.full_like(a, -two_g)
    hi = np.full_like(a, two_g)
    out = np.maximum(_f_alpha(a, rho, dim, lo), _f_alpha(a, rho, dim, hi))
    out = np.maximum(out, a * rho)  # v = 1 (the kink)
    b = a - 1.0
    big_b = a * rho + dim * (2.0 * a - 1.0) / 2.0
    # v_* = dα / (B + sqrt(B² − d²αb)), written with the ratios dα/B ≤ 2 and db/B < 1 so
    # nothing overflows for huge α.
    r_a, r_b = dim * a / big_b, dim * b / big_b
    v_star = r_a / (1.0 + np.sqrt(np.maximum(1.0 - r_a * r_b, 0.0)))
    inside = v_star > math.exp(-two_g)
    if np.any(inside):
        f_star = _f_alpha(a, rho, dim, np.log(np.where(inside, v_star, 1.0)))
        out = np.where(inside, np.maximum(out, f_star), out)
    return np.where(a < _alpha_max(gamma), out, np.inf)


def smooth_gaussian_rdp(
    alpha: float | np.ndarray, rho: float, *, gamma: float = 0.0, dim: int = 1
) -> float | np.ndarray:
    """RDP curve ``ε_step(α)`` of one smooth-sensitivity Gaussian step (``docs/spec.md`` §4).

    The step adds ``N(0, s² I_d)`` with ``s = Δ̄/sqrt(2ρ)``, where ``Δ̄`` is a γ-smooth
    upper bound on the local sensitivity (Nissim, Raskhodnikova & Smith 2007)::

        ε_step(α) = sup_{v ∈ [e^{-2γ}, e^{2γ}]} [ αρ·min(v,1)/(α−(α−1)v)
                     − d/(2(α−1))·(log(α−(α−1)v) + (α−1) log v) ]

    computed exactly (see :func:`_smooth_step_rdp`); ``+∞`` for
    ``α ≥ e^{2γ}/(e^{2γ}−1)``; exactly ``αρ`` when γ = 0 (the Gaussian mechanism,
    Mironov 2017, §VI, Table II). Accepts a scalar or an array of orders.

    >>> float(smooth_gaussian_rdp(2.0, 0.5))
    1.0
    """
    a = _check_alpha(alpha)
    r = check_nonnegative("rho", rho)
    g = check_nonnegative("gamma", gamma)
    d = check_int_at_least("dim", dim, 1)
    out = _smooth_step_rdp(np.atleast_1d(a), r, g, d)
    return float(out[0]) if a.ndim == 0 else out.reshape(a.shape)


def _conversion(x: np.ndarray, rdp: np.ndarray, delta: float) -> np.ndarray:
    """``ε_RDP(α) + log((α−1)/α) − (log δ + log α)/(α−1)`` at ``α = 1 + x``.

    Balle et al. 2020, Thm 21; Canonne, Kamath & Steinke 2020, Prop. 12. Where
    ``δ² ≥ 1 − e^{−ε_RDP(α)}`` the release is already (0, δ)-DP: total variation is at
    most ``sqrt(1 − e^{−KL})`` (Bretagnolle–Huber) and ``KL ≤ ε_RDP(α)`` — the same
    shortcut as ``dp_accounting.rdp.compute_epsilon``.
    """
    log1p_x = np.log1p(x)
    with np.errstate(invalid="ignore", over="ignore"):
        eps = rdp + np.log(x) - log1p_x - (math.log(delta) + log1p_x) / x
        kl_shortcut = delta * delta + np.expm1(-rdp) > 0.0
    eps = np.where(np.isfinite(rdp), eps, np.inf)
    return np.where(kl_shortcut, 0.0, eps)


def rdp_to_epsilon(
    orders: Iterable[float], rdp: Iterable[float], delta: float
) -> tuple[float, float]:
    """Best (ε, α) over the given orders for an ``(α, rdp[α])``-RDP mechanism at δ.

    The same conversion as ``dp_accounting.rdp.compute_epsilon`` (Balle et al. 2020,
    Thm 21 / Canonne, Kamath & Steinke 2020, Prop. 12), clipped at 0. Used to compare
    against accountants that work on a fixed grid of orders; :class:`RdpAccountant`
    minimises over continuous α instead.
    """
    a = _check_alpha(np.asarray(list(orders), dtype=np.float64))
    r = np.asarray(list(rdp), dtype=np.float64)
    dl = check_delta(delta)
    if a.shape != r.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(
            f"orders and rdp must be non-empty 1-D sequences of equal length; "
            f"got shapes {a.shape} and {r.shape}."
        )
    if np.any(np.isnan(r)) or np.any(r < 0):
        raise ValueError(f"rdp values must be >= 0 and not NaN. Found {r[~(r >= 0)][0]}.")
    eps = _conversion(a - 1.0, r, dl)
    i = int(np.argmin(eps))
    return max(0.0, float(eps[i])), float(a[i])


def _minimize_conversion(
    curve: Callable[[np.ndarray], np.ndarray], alpha_max: float, delta: float
) -> tuple[float, float]:
    """``min_α`` of the conversion over continuous ``α ∈ (1, alpha_max)``.

    A log grid over ``x = α − 1`` (dense near ``alpha_max`` where the curve blows up)
    brackets the minimiser; one vectorised pass of :data:`_REFINE_POINTS` orders evenly
    spaced in ``log x`` across the bracket, and the vertex of the parabola through the
    best of them and its neighbours, refine it. The smallest value seen is returned with
    its order, so the answer is never worse than the grid and always a valid ε (any
    order is); the refinement only makes it tighter.
    """

    def objective(x: np.ndarray) -> np.ndarray:
        return _conversion(x, curve(1.0 + x), delta)

    if alpha_max - 1.0 > _X_MAX:  # γ = 0, or γ so small that orders this large are moot
        xs = np.logspace(math.log10(_X_MIN), math.log10(_X_MAX), 181)
    else:
        x_top = alpha_max - 1.0
        if not x_top > 0.0:  # no finite order left (γ huge): every ε is infinite
            return math.inf, math.nan
        x_lo = min(_X_MIN, x_top * 1e-3)
        body = np.logspace(math.log10(x_lo), math.log10(x_top), 121)[:-1]
        near_top = x_top * (1.0 - np.logspace(-12.0, -0.5, 24))
        xs = np.unique(np.concatenate([body, near_top]))
        xs = xs[(xs > 0.0) & (xs < x_top)]
    vals = objective(xs)
    i = int(np.argmin(vals))
    best_eps, best_x = float(vals[i]), float(xs[i])
    if not math.isfinite(best_eps):
        return math.inf, 1.0 + best_x
    if best_eps > 0.0:
        lo_t = math.log(xs[max(i - 1, 0)])
        hi_t = math.log(xs[min(i + 1, xs.size - 1)])
        if hi_t > lo_t:  # one vectorised pass across the bracket, then a parabola
            ts = np.linspace(lo_t, hi_t, _REFINE_POINTS)
            v = objective(np.exp(ts))
            j = int(np.argmin(v))
            if float(v[j]) < best_eps:
                best_eps, best_x = float(v[j]), math.exp(float(ts[j]))
            if 0 < j < ts.size - 1 and math.isfinite(float(v[j - 1] + v[j + 1])):
                # the vertex of the parabola through the best point and its neighbours
                f0, f1, f2 = float(v[j - 1]), float(v[j]), float(v[j + 1])
                curv = f0 - 2.0 * f1 + f2
                if curv > 0.0:
                    t_star = float(ts[j]) + 0.5 * float(ts[1] - ts[0]) * (f0 - f2) / curv
                    if ts[j - 1] < t_star < ts[j + 1]:
                        e = float(objective(np.array([math.exp(t_star)]))[0])
                        if e < best_eps:
                            best_eps, best_x = e, math.exp(t_star)
    return max(0.0, best_eps), 1.0 + best_x
