"""Privacy accounting for BRACE: zCDP, Rényi DP of smooth-sensitivity Gaussian steps,
composition, conversion to (ε, δ) and noise calibration.

The module follows Google ``dp-accounting`` in separating *describing* a release from
*accounting* for it:

* events (:class:`GaussianStep`, :class:`SmoothGaussianStep`, :class:`Composed`,
  :class:`SelfComposed`) are small frozen records with no mathematics in them; events are
  only ever added to this module, never re-meant;
* :class:`RdpAccountant` turns events into a Rényi-DP curve ``α ↦ ε_RDP(α)`` (RDP adds
  under adaptive composition) and converts it once to (ε, δ);
* :func:`calibrate` (built on :func:`calibrate_rho` and :func:`choose_gamma`) returns a
  frozen :class:`PrivacySpent` that says what a release spends.

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

minimised here over continuous α (a coarse log grid brackets the optimum, then bounded
Brent). The conversion at *any* α is a valid bound, so inexact minimisation can
only over-state ε, never under-state it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from scipy.optimize import minimize_scalar

from brace._validation import (
    check_delta,
    check_epsilon,
    check_int_at_least,
    check_nonnegative,
    check_positive,
    check_steps,
)

__all__ = [
    # zCDP (Bun & Steinke 2016)
    "rho_from_eps_delta",
    "eps_from_rho_delta",
    "gaussian_zcdp",
    "compose_zcdp",
    # Rényi DP (Mironov 2017)
    "gaussian_renyi_divergence",
    "smooth_gaussian_rdp",
    "max_rdp_order",
    "rdp_to_epsilon",
    # events and the accountant
    "DpEvent",
    "GaussianStep",
    "SmoothGaussianStep",
    "CountedGaussianStep",
    "Composed",
    "SelfComposed",
    "NonPrivateEvent",
    "UnsupportedEventError",
    "RdpAccountant",
    # calibration
    "epsilon_spent",
    "calibrate_rho",
    "choose_gamma",
    "choose_gamma_for_gates",
    "gate_factor",
    "calibrate",
    "calibrate_count",
    "predicted_noise_ratio",
    "choose_release",
    "ReleaseChoice",
    "AUTO_GLOBAL_RATIO",
    "PrivacySpent",
    "format_spent",
    "ACCOUNTING_RULES",
]

ACCOUNTING_RULES = ("rdp", "paper")
NOT_PRIVATE_MECHANISMS = ("naive",)  # releases with no DP guarantee (NonPrivateEvent)

_RHO_RTOL = 1e-9  # relative tolerance of the calibrated per-step ρ
_GAMMA_RTOL = 1e-7  # relative tolerance of the γ chosen by choose_gamma
_X_MIN = 1e-6  # smallest α − 1 considered by the conversion (the bound is useless there)
_X_MAX = 1e12  # largest α − 1 considered when every order is finite (γ = 0)


# --------------------------------------------------------------------------------------
# zCDP
# --------------------------------------------------------------------------------------


def rho_from_eps_delta(epsilon: float, delta: float) -> float:
    """The ρ whose zCDP guarantee converts to exactly (ε, δ)-DP.

    ``ρ(ε, δ) = (sqrt(log(1/δ) + ε) − sqrt(log(1/δ)))²``, the inverse of
    :func:`eps_from_rho_delta` (Bun & Steinke 2016, Prop. 1.3). Computed as
    ``(ε / (sqrt(L + ε) + sqrt(L)))²`` with ``L = log(1/δ)`` to avoid cancellation.

    >>> round(rho_from_eps_delta(128.0, 1e-5) / 5, 4)
    14.1742
    """
    eps = check_epsilon(epsilon)
    dl = check_delta(delta)
    log_inv = -math.log(dl)
    return (eps / (math.sqrt(log_inv + eps) + math.sqrt(log_inv))) ** 2


def eps_from_rho_delta(rho: float, delta: float) -> float:
    """ε such that ρ-zCDP implies (ε, δ)-DP: ``ε = ρ + 2 sqrt(ρ log(1/δ))``.

    Bun & Steinke 2016, Prop. 1.3.

    >>> eps_from_rho_delta(rho_from_eps_delta(3.0, 1e-6), 1e-6)  # doctest: +ELLIPSIS
    3.0...
    """
    r = check_nonnegative("rho", rho)
    dl = check_delta(delta)
    return r + 2.0 * math.sqrt(r * -math.log(dl))


def gaussian_zcdp(sensitivity: float, sigma: float) -> float:
    """zCDP parameter of the Gaussian mechanism: ``ρ = Δ² / (2σ²)``.

    Adding ``N(0, σ² I_d)`` to a query of L2 sensitivity Δ is ρ-zCDP
    (Bun & Steinke 2016, Prop. 1.6), i.e. (α, αρ)-RDP for all α > 1 (Mironov 2017).
    """
    s = check_nonnegative("sensitivity", sensitivity)
    sg = check_positive("sigma", sigma)
    return s * s / (2.0 * sg * sg)


def compose_zcdp(rhos: Iterable[float]) -> float:
    """zCDP composes additively: ρ-zCDP mechanisms ρ_1, …, ρ_k give Σ ρ_i (adaptively).

    Bun & Steinke 2016, Lemma 1.7.
    """
    total = 0.0
    for i, r in enumerate(rhos):
        total += check_nonnegative(f"rhos[{i}]", r)
    return total


# --------------------------------------------------------------------------------------
# Rényi divergences and the RDP curve of one step
# --------------------------------------------------------------------------------------


def _check_alpha(alpha: Any) -> np.ndarray:
    a = np.asarray(alpha, dtype=np.float64)
    if a.size and not np.all(a > 1.0):  # also rejects NaN
        bad = a[~(a > 1.0)].ravel()[0]
        raise ValueError(f"Rényi order alpha must be > 1. Found {bad}.")
    return a


def gaussian_renyi_divergence(
    alpha: float, mean_distance: float, s: float, s_prime: float, *, dim: int = 1
) -> float:
    """Rényi divergence ``D_α(N(u, s² I_d) ‖ N(u', s'² I_d))`` with ``‖u − u'‖ = mean_distance``.

    With ``v = s²/s'²`` and ``h = α − (α−1)v`` (Gil, Alajaji & Linder 2013, normal entry;
    derivation in ``docs/privacy-accounting.md``, Lemma 1)::

        D_α = α‖u − u'‖² / (2 s'² h) − d/(2(α−1)) · (log h + (α−1) log v)

    for ``h > 0``, and ``+∞`` when ``h ≤ 0`` (the integral diverges).
    """
    a = float(_check_alpha(alpha))
    m = check_nonnegative("mean_distance", mean_distance)
    s1 = check_positive("s", s)
    s2 = check_positive("s_prime", s_prime)
    d = check_int_at_least("dim", dim, 1)
    b = a - 1.0
    log_v = 2.0 * (math.log(s1) - math.log(s2))
    h = a - b * math.exp(log_v)
    if not h > 0.0:
        return math.inf
    return a * m * m / (2.0 * s2 * s2 * h) - d / (2.0 * b) * (math.log(h) + b * log_v)


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


# --------------------------------------------------------------------------------------
# RDP → (ε, δ)
# --------------------------------------------------------------------------------------


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
    brackets the minimiser; bounded Brent on ``log x`` refines it inside the bracket.
    The smaller of the grid and Brent values is returned with its order, so the answer
    is never worse than the grid and always a valid ε (any order is).
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
        if hi_t > lo_t:
            res = minimize_scalar(
                lambda t: float(objective(np.array([math.exp(t)]))[0]),
                bounds=(lo_t, hi_t),
                method="bounded",
                options={"xatol": 1e-12},
            )
            if res.success and float(res.fun) < best_eps:
                best_eps, best_x = float(res.fun), math.exp(float(res.x))
    return max(0.0, best_eps), 1.0 + best_x


# --------------------------------------------------------------------------------------
# Events: describe, do not compute
# --------------------------------------------------------------------------------------


class DpEvent:
    """Base class of the event records. Events only describe; accountants compute.

    As in ``dp_accounting.dp_event``, event types are only ever added, never re-meant.
    """

    __slots__ = ()


@dataclasses.dataclass(frozen=True, slots=True)
class GaussianStep(DpEvent):
    """One Gaussian release with fixed sensitivity and zCDP parameter ``rho = Δ²/(2σ²)``.

    Equivalent to ``dp_accounting.GaussianDpEvent(noise_multiplier=1/sqrt(2·rho))``.
    """

    rho: float


@dataclasses.dataclass(frozen=True, slots=True)
class SmoothGaussianStep(DpEvent):
    """One release ``Q + N(0, Δ̄²/(2·rho) · I_dim)`` with a ``gamma``-smooth bound ``Δ̄``."""

    rho: float
    gamma: float
    dim: int


@dataclasses.dataclass(frozen=True, slots=True)
class CountedGaussianStep(DpEvent):
    """One step of the count release (``docs/privacy-accounting.md`` §9).

    A noisy gate count ``m̃ = m + Z`` (two-sided geometric, pure ``eps_count``-DP) proposes
    the sensitivity ``b``; the step then adds Gaussian noise of std ``b/sqrt(2·rho)``.
    With probability at most ``delta_count`` (per bank) the proposal exceeds the true
    bound; outside that event the step is ``rho + (eps_count + log(1/(1 − delta_count)))²/2``
    -zCDP (Bun & Steinke 2016, Prop. 1.4 and §8, approximate zCDP).
    """

    rho: float
    eps_count: float
    delta_count: float


@dataclasses.dataclass(frozen=True, slots=True)
class Composed(DpEvent):
    """Adaptive composition of several events, in order."""

    events: tuple[DpEvent, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class SelfComposed(DpEvent):
    """``count`` adaptive repetitions of ``event``."""

    event: DpEvent
    count: int


@dataclasses.dataclass(frozen=True, slots=True)
class NonPrivateEvent(DpEvent):
    """A release with no differential-privacy guarantee (as dp-accounting's
    ``NonPrivateDpEvent``): every accountant maps it, and anything composed with it, to
    ε = ∞. ``reason`` says why (e.g. the naive baseline's data-dependent noise scale)."""

    reason: str = ""


class UnsupportedEventError(ValueError):
    """An accountant was asked to compose an event it cannot account for."""


# --------------------------------------------------------------------------------------
# The accountant
# --------------------------------------------------------------------------------------


class RdpAccountant:
    """Rényi-DP accountant over continuous orders (Mironov 2017).

    Composition adds RDP curves (Mironov 2017, Prop. 1, adaptive); :meth:`get_epsilon`
    converts once with Balle et al. 2020 Thm 21 / Canonne, Kamath & Steinke 2020
    Prop. 12, minimised over continuous α. An empty accountant spends ε = 0.

    >>> acc = RdpAccountant().compose(GaussianStep(0.5), count=4)
    >>> round(acc.get_epsilon(1e-5), 3)
    10.725
    """

    def __init__(self) -> None:
        self._ledger: list[DpEvent] = []
        self._rho_fixed = 0.0  # Σ count·ρ over GaussianStep: RDP α·Σρ
        self._smooth: dict[tuple[float, float, int], int] = {}  # (ρ, γ, d) → count
        self._non_private = False  # a NonPrivateEvent was composed: ε = ∞ from now on
        self._delta_extra = 0.0  # Σ count·δ of the events that hold except with prob. δ

    # One traversal serves both the dry run (supports / validation) and the update,
    # so the two cannot drift apart (as dp_accounting's _maybe_compose).
    def _maybe_compose(self, event: DpEvent, count: int, do_compose: bool) -> str | None:
        if isinstance(event, SelfComposed):
            c = check_int_at_least("SelfComposed.count", event.count, 0)
            return self._maybe_compose(event.event, c * count, do_compose)
        if isinstance(event, Composed):
            for e in event.events:
                err = self._maybe_compose(e, count, do_compose)
                if err is not None:
                    return err
            return None
        if isinstance(event, NonPrivateEvent):
            if do_compose and count:
                self._non_private = True
            return None
        if isinstance(event, GaussianStep):
            rho = check_nonnegative("GaussianStep.rho", event.rho)
            if do_compose:
                self._rho_fixed += count * rho
            return None
        if isinstance(event, CountedGaussianStep):
            rho = check_nonnegative("CountedGaussianStep.rho", event.rho)
            ec = check_nonnegative("CountedGaussianStep.eps_count", event.eps_count)
            dc = check_nonnegative("CountedGaussianStep.delta_count", event.delta_count)
            if not dc < 1.0:
                return f"CountedGaussianStep.delta_count must be < 1. Found {dc}."
            if do_compose:
                self._rho_fixed += count * (rho + 0.5 * (ec + math.log1p(dc / (1.0 - dc))) ** 2)
                self._delta_extra += count * dc
            return None
        if isinstance(event, SmoothGaussianStep):
            rho = check_nonnegative("SmoothGaussianStep.rho", event.rho)
            gamma = check_nonnegative("SmoothGaussianStep.gamma", event.gamma)
            dim = check_int_at_least("SmoothGaussianStep.dim", event.dim, 1)
            if do_compose and count:
                if gamma == 0.0:
                    self._rho_fixed += count * rho
                else:
                    key = (rho, gamma, dim)
                    self._smooth[key] = self._smooth.get(key, 0) + count
            return None
        return f"RdpAccountant does not support {event!r} (type {type(event).__name__})."

    def supports(self, event: DpEvent) -> bool:
        """Whether every sub-event of ``event`` can be accounted for here."""
        return self._maybe_compose(event, 1, do_compose=False) is None

    def compose(self, event: DpEvent, count: int = 1) -> RdpAccountant:
        """Add ``count`` adaptive repetitions of ``event``; returns ``self`` (chainable)."""
        c = check_int_at_least("count", count, 1)
        err = self._maybe_compose(event, c, do_compose=False)
        if err is not None:
            raise UnsupportedEventError(err)
        self._maybe_compose(event, c, do_compose=True)
        self._ledger.append(event if c == 1 else SelfComposed(event, c))
        return self

    @property
    def ledger(self) -> Composed:
        """Everything composed so far, as one event."""
        return Composed(tuple(self._ledger))

    @property
    def max_order(self) -> float:
        """Supremum of the orders with finite RDP (``+∞`` without smooth steps; 1 — no
        finite order — once a :class:`NonPrivateEvent` is composed)."""
        if self._non_private:
            return 1.0
        return min((_alpha_max(g) for (_, g, _) in self._smooth), default=math.inf)

    def _curve(self, a: np.ndarray) -> np.ndarray:
        if self._non_private:
            return np.full_like(a, np.inf, dtype=np.float64)
        out = a * self._rho_fixed
        for (rho, gamma, dim), c in self._smooth.items():
            out = out + c * _smooth_step_rdp(a, rho, gamma, dim)
        return out

    def rdp(self, alpha: float | np.ndarray) -> float | np.ndarray:
        """The composed RDP curve ``ε_RDP(α) = Σ_steps ε_step(α)`` at the given order(s)."""
        a = _check_alpha(alpha)
        out = self._curve(np.atleast_1d(a))
        return float(out[0]) if a.ndim == 0 else out.reshape(a.shape)

    def get_epsilon_and_order(self, delta: float) -> tuple[float, float]:
        """``(ε, α_opt)``: the smallest ε over continuous α, and the order attaining it.

        Events that hold except with probability ``δ_E`` in total (the count release)
        are charged as in ``docs/privacy-accounting.md`` §9: the RDP curve is converted at
        ``δ − δ_E`` and ``log(1/(1 − δ_E))`` is added to ε (``+∞`` if ``δ ≤ δ_E``).
        """
        dl = check_delta(delta)
        if self._non_private:
            return math.inf, math.nan
        if self._delta_extra > 0.0:
            de = self._delta_extra
            if not dl > de:
                return math.inf, math.nan
            eps, alpha = self._conditional_epsilon(dl - de)
            return eps - math.log1p(-de), alpha
        return self._conditional_epsilon(dl)

    def _conditional_epsilon(self, dl: float) -> tuple[float, float]:
        if not self._smooth and self._rho_fixed == 0.0:
            return 0.0, math.inf
        return _minimize_conversion(self._curve, self.max_order, dl)

    def get_epsilon(self, delta: float) -> float:
        """ε such that everything composed so far is (ε, δ)-DP."""
        return self.get_epsilon_and_order(delta)[0]


# --------------------------------------------------------------------------------------
# Calibration
# --------------------------------------------------------------------------------------


def _step_event(rho: float, gamma: float, dim: int) -> DpEvent:
    return GaussianStep(rho) if gamma == 0.0 else SmoothGaussianStep(rho, gamma, dim)


def _eps_and_order(
    rho: float, steps: int, delta: float, dim: int, gamma: float
) -> tuple[float, float]:
    acc = RdpAccountant().compose(_step_event(rho, gamma, dim), steps)
    if rho == 0.0 and gamma == 0.0:
        return 0.0, math.inf
    return acc.get_epsilon_and_order(delta)


EPSILON_RANGE = (1e-6, 1e6)
GAMMA_MAX = 10.0


def _check_common(epsilon, delta, steps, dim, gamma):
    """Validate; ε and γ must also lie in the supported ranges (outside them the
    calibration is meaningless: ρ underflows, or no Rényi order is finite)."""
    eps = check_epsilon(epsilon)
    lo, hi = EPSILON_RANGE
    if not lo <= eps <= hi:
        raise ValueError(f"epsilon must lie in the supported range [{lo:g}, {hi:g}]. Found {eps}.")
    g = check_nonnegative("gamma", gamma)
    if g > GAMMA_MAX:
        raise ValueError(
            f"gamma is too large: the supported range is [0, {GAMMA_MAX:g}] (the variance "
            f"mismatch e^(2 gamma) leaves no finite Renyi order). Found {g}."
        )
    return (eps, check_delta(delta), check_steps(steps), check_int_at_least("dim", dim, 1), g)


def epsilon_spent(
    rho_per_step: float, steps: int, delta: float, *, dim: int = 1, gamma: float = 0.0
) -> float:
    """RDP-accounted ε of ``steps`` adaptive (smooth-sensitivity) Gaussian steps at δ.

    Each step is ``(α, ε_step(α))``-RDP (:func:`smooth_gaussian_rdp`); T steps are
    ``(α, T·ε_step(α))``-RDP; the result is the conversion minimised over α.

    >>> round(epsilon_spent(0.5, 4, 1e-5), 3)
    10.725
    """
    rho = check_positive("rho_per_step", rho_per_step)
    t = check_steps(steps)
    dl = check_delta(delta)
    d = check_int_at_least("dim", dim, 1)
    g = check_nonnegative("gamma", gamma)
    return _eps_and_order(rho, t, dl, d, g)[0]


def _calibrate_rho(epsilon: float, delta: float, steps: int, dim: int, gamma: float) -> float:
    """Largest ρ (to relative 1e-9) with ``ε(ρ) ≤ epsilon``; inputs already validated."""

    def eps_of(rho: float) -> float:
        return _eps_and_order(rho, steps, delta, dim, gamma)[0]

    if gamma > 0.0:
        floor = eps_of(0.0)
        if not floor < epsilon:
            raise ValueError(
                f"gamma = {gamma} is too large for dim = {dim}, steps = {steps}, "
                f"delta = {delta}: the variance mismatch alone spends epsilon = {floor:.6g} "
                f">= the target {epsilon}, even with infinite noise. Use a smaller gamma "
                f"(e.g. choose_gamma(...))."
            )
    # ε(ρ) is continuous and nondecreasing in ρ (docs, §5): bracket on log ρ, then bisect.
    guess = rho_from_eps_delta(epsilon, delta) / steps
    lo = hi = guess
    if eps_of(guess) <= epsilon:
        while True:
            hi = lo * 2.0
            if eps_of(hi) > epsilon:
                break
            lo = hi
            if not math.isfinite(2.0 * lo):
                raise ValueError(
                    f"epsilon = {epsilon} is too large to calibrate: the per-step rho "
                    "overflows float64. Use a smaller epsilon."
                )
    else:
        while True:
            lo = hi / 2.0
            if eps_of(lo) <= epsilon:
                break
            hi = lo
            if lo < 1e-300:
                raise ValueError(
                    f"epsilon = {epsilon} is too small for delta = {delta}: the required "
                    "rho per step is below 1e-300. Use a larger epsilon or delta."
                )
    while math.log(hi / lo) > _RHO_RTOL:
        mid = math.sqrt(lo * hi)
        if eps_of(mid) <= epsilon:
            lo = mid
        else:
            hi = mid
    # Re-check that the answer never overspends (as dp_accounting's mechanism_calibration).
    spent = eps_of(lo)
    if not spent <= epsilon:  # pragma: no cover - lo is kept feasible by construction
        raise RuntimeError(f"calibrate_rho overspends: epsilon {spent} > target {epsilon}.")
    return lo


def calibrate_rho(
    epsilon: float, delta: float, steps: int, *, dim: int = 1, gamma: float = 0.0
) -> float:
    """Per-step ρ whose T-fold composition spends exactly (ε, δ) under RDP accounting.

    Bisection on ``log ρ`` to relative tolerance 1e-9, returning the feasible end, so
    ``epsilon_spent(ρ, T, δ, dim=d, gamma=γ) ≤ ε`` always holds (re-checked). With
    γ > 0 the variance term spends ε even as ρ → 0; if that floor already reaches the
    target, no ρ works and a ``ValueError`` says so.

    >>> round(calibrate_rho(128.0, 1e-5, 5, dim=2, gamma=0.05), 2)
    13.89
    """
    eps, dl, t, d, g = _check_common(epsilon, delta, steps, dim, gamma)
    return _calibrate_rho(eps, dl, t, d, g)


def choose_gamma(
    epsilon: float, delta: float, steps: int, *, dim: int, fraction: float = 0.9
) -> float:
    """Data-independent smoothness: the largest γ whose calibrated ρ is ≥ ``fraction`` × ρ(γ=0).

    Depends only on the public (ε, δ, T, d, fraction), never on the data (``docs/spec.md`` §4).
    Because ``ε(ρ, γ)`` is nondecreasing in both arguments, ``calibrate_rho(γ) ≥ f·ρ_0``
    iff ``ε(f·ρ_0, γ) ≤ ε``, so the rule is a bisection on γ of one accounting call each
    (relative tolerance 1e-7, returning the feasible end).
    """
    eps, dl, t, d, _ = _check_common(epsilon, delta, steps, dim, 0.0)
    f = check_positive("fraction", fraction)
    if f > 1.0:
        raise ValueError(f"fraction must lie in (0, 1]. Found {f}.")
    return _choose_gamma(eps, dl, t, d, f)


def _choose_gamma(eps: float, dl: float, t: int, d: int, f: float = 0.9) -> float:
    """:func:`choose_gamma` on validated inputs."""
    if f == 1.0:
        return 0.0
    target_rho = f * _calibrate_rho(eps, dl, t, d, 0.0)

    def feasible(g: float) -> bool:
        return _eps_and_order(target_rho, t, dl, d, g)[0] <= eps

    lo, hi = 0.0, 1e-3
    while feasible(hi):
        lo, hi = hi, hi * 2.0
        if hi > 1e3:  # pragma: no cover - α_max → 1 makes every ε infinite long before
            raise RuntimeError("choose_gamma: could not bracket gamma.")
    while hi - lo > _GAMMA_RTOL * hi and hi > 1e-12:  # below 1e-12, γ = lo (0: global)
        mid = 0.5 * (lo + hi)
        if feasible(mid):
            lo = mid
        else:
            hi = mid
    return lo


GATE_RULE_MARGIN = 20.0  # m_min = ceil(20 log(1/δ) / ε): the gates the rule optimises for


def gate_factor(gamma: float, m: np.ndarray, n: int) -> np.ndarray:
    """``Δ̄ / (2r/m)`` of the fixed-centre certificate for a gate of ``m`` memories.

    ``Δ̄ = max(max_{k ≤ K} e^{-γk}·2r/max(m − k, 1), e^{-γ(K+1)}·2r)`` with
    ``K = min(n − 1, ⌈log n / γ⌉, 4096)`` (``brace.sensitivity``): the factor by which the
    smooth bound exceeds the oracle ``2r/m`` that knows the gate size. Data independent.
    """
    from .sensitivity import n_terms  # deferred: sensitivity imports memory

    m = np.atleast_1d(np.asarray(m, dtype=np.float64))
    K = n_terms(n, gamma)
    k = np.arange(K + 1, dtype=np.float64)
    F = np.exp(-gamma * k)[None, :] / np.maximum(m[:, None] - k[None, :], 1.0)
    tail = math.exp(-gamma * (K + 1))
    return m * np.maximum(F.max(axis=1), tail)


def choose_gamma_for_gates(
    epsilon: float, delta: float, steps: int, *, dim: int, n: int,
    m_min: int | None = None,
) -> float:
    """Data-independent γ, near-optimal across gate sizes (``docs/privacy-accounting.md`` §6).

    With ``J(γ, m) = gate_factor(γ, m, n) · sqrt(ρ_0 / ρ(γ))`` — the noise std of BRACE
    without correction for a gate of ``m`` memories divided by the oracle's
    ``(2r/m)/sqrt(2ρ_0)``, ``ρ(γ)`` the calibrated per-step ρ (:func:`calibrate_rho`) and
    ``ρ_0`` its γ = 0 value — the rule is the minimax choice over gate sizes::

        γ* = argmin_γ max_{m ∈ [m_min, n]} J(γ, m),

    over a log grid of 40 values of γ in ``[1e-4, GAMMA_MAX]`` (the feasible ones),
    refined by a golden-section search between the grid neighbours of the best.
    ``m_min`` defaults to ``⌈20·log(1/δ)/ε⌉`` (clipped to ``[2, n]``). Depends only on the
    public ``(ε, δ, T, d, n, m_min)``; memoised.
    """
    eps, dl, t, d, _ = _check_common(epsilon, delta, steps, dim, 0.0)
    nn = check_int_at_least("n", n, 1)
    if m_min is None:
        m0 = math.ceil(GATE_RULE_MARGIN * math.log(1.0 / dl) / eps)
    else:
        m0 = check_int_at_least("m_min", m_min, 1)
    m0 = int(min(max(m0, 2), max(nn, 2)))
    return _gate_rule(eps, dl, t, d, nn, m0)


@functools.lru_cache(maxsize=512)
def _gate_rule(eps: float, dl: float, t: int, d: int, n: int, m0: int) -> float:
    rho0 = _calibrate_rho(eps, dl, t, d, 0.0)
    ms = np.unique(np.round(np.geomspace(m0, max(n, m0), 40)))

    def worst(log_g: float) -> float:  # max over gates of noise std / oracle
        g = math.exp(log_g)
        try:
            rho = _calibrate_rho(eps, dl, t, d, g)
        except ValueError:  # γ infeasible for (ε, δ, T, d)
            return math.inf
        return float(gate_factor(g, ms, n).max()) * math.sqrt(rho0 / rho)

    grid = np.linspace(math.log(1e-4), math.log(GAMMA_MAX), 40)
    vals = []
    for x in grid:
        vals.append(worst(float(x)))
        if not math.isfinite(vals[-1]):  # larger γ are infeasible too
            break
    i = int(np.argmin(vals))
    lo, hi = float(grid[max(i - 1, 0)]), float(grid[min(i + 1, len(vals) - 1)])
    phi = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = hi - phi * (hi - lo), lo + phi * (hi - lo)
    fa, fb = worst(a), worst(b)
    for _ in range(12):
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = hi - phi * (hi - lo)
            fa = worst(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + phi * (hi - lo)
            fb = worst(b)
    return math.exp(min([(vals[i], float(grid[i])), (fa, a), (fb, b)])[1])


@dataclasses.dataclass(frozen=True, slots=True)
class PrivacySpent:
    """What a release spends: the calibrated per-step noise and its guarantee.

    ``epsilon, delta``: the target, (ε, δ)-DP for the whole release of ``steps`` steps.
    ``rho_per_step``: each step adds ``N(0, Δ̄²/(2ρ) I_dim)``. ``gamma``: smoothness of
    the sensitivity bound (0 = fixed sensitivity). ``accounting``: ``"rdp"`` (RDP
    composition, one conversion) or ``"paper"`` (the paper's per-step rules).
    ``epsilon_rdp``: the ε actually spent at ``delta`` under RDP accounting, attained at
    order ``alpha_opt`` (≤ ``epsilon`` for ``"rdp"``; for ``"paper"`` it shows how much
    the paper's rule leaves unused).

    ``queries``: how many queries the release answered (each one the (ε, δ) above), and
    ``epsilon_total``: the ε of all of them composed (RDP curves summed over queries and
    steps, one conversion at the same ``delta``; see :meth:`for_queries`). A release by a
    mechanism in :data:`NOT_PRIVATE_MECHANISMS` (``"naive"``) has no guarantee: its
    :attr:`event` is a :class:`NonPrivateEvent` and ``epsilon_total`` is ∞.
    """

    epsilon: float
    delta: float
    steps: int
    dim: int
    gamma: float
    rho_per_step: float
    accounting: str
    mechanism: str = ""
    epsilon_rdp: float = math.nan
    alpha_opt: float = math.nan
    release: str = "smooth"  # "count": noisy-count proposal, fixed Gaussian (§9)
    eps_count: float = 0.0  # count release: pure DP of each noisy gate count
    delta_count: float = 0.0  # count release: per-step failure probability of the proposal
    count_margin: int = 0  # count release: proposal m̃ − margin (a lower bound w.p. ≥ 1 − δ)
    queries: int = 1
    epsilon_total: float = math.nan
    not_private_reason: str = ""

    @property
    def is_private(self) -> bool:
        """False for a mechanism without a DP guarantee (``"naive"``) or a release marked
        not private (``not_private_reason``, e.g. innovations supplied by the caller)."""
        return not self.not_private_reason and self.mechanism not in NOT_PRIVATE_MECHANISMS

    def for_queries(self, queries: int) -> PrivacySpent:
        """This calibration applied to ``queries`` queries: sets ``queries`` and the
        composed ``epsilon_total`` at ``delta`` (∞ when not private)."""
        n = check_int_at_least("queries", queries, 1)
        if not self.is_private:
            total = math.inf
        else:
            total = RdpAccountant().compose(self.step_event, self.steps * n).get_epsilon(
                self.delta
            )
        return dataclasses.replace(self, queries=n, epsilon_total=total)

    @property
    def noise_multiplier(self) -> float:
        """Noise std per unit of sensitivity: ``s/Δ̄ = 1/sqrt(2ρ)``."""
        return 1.0 / math.sqrt(2.0 * self.rho_per_step)

    def noise_std(self, sensitivity: float) -> float:
        """Per-coordinate noise std for a step with sensitivity (bound) ``sensitivity``."""
        return check_nonnegative("sensitivity", sensitivity) * self.noise_multiplier

    @property
    def step_event(self) -> DpEvent:
        """One step of one query, as an event (:class:`NonPrivateEvent` if not private)."""
        if not self.is_private:
            return NonPrivateEvent(
                self.not_private_reason
                or f"mechanism {self.mechanism!r}: the noise scale depends on the data"
            )
        if self.release == "count":
            return CountedGaussianStep(self.rho_per_step, self.eps_count, self.delta_count)
        return _step_event(self.rho_per_step, self.gamma, self.dim)

    @property
    def event(self) -> DpEvent:
        """The release of one query described as an event (``steps`` self-composed
        steps); a :class:`NonPrivateEvent` for a mechanism without a guarantee."""
        if not self.is_private:
            return self.step_event
        return SelfComposed(self.step_event, self.steps)

    @property
    def call_event(self) -> DpEvent:
        """The whole release (all ``queries`` queries) as one event."""
        if not self.is_private:
            return self.step_event
        return SelfComposed(self.step_event, self.steps * self.queries)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict of every field plus ``noise_multiplier`` and ``rho_total``."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["noise_multiplier"] = self.noise_multiplier
        out["rho_total"] = self.rho_per_step * self.steps
        out["is_private"] = self.is_private
        out["epsilon_total_delta"] = self.delta
        for k, v in list(out.items()):  # strict JSON: no inf/nan, null plus a reason
            if isinstance(v, float) and not math.isfinite(v):
                out[k] = None
                if k == "epsilon_total" and not self.is_private:
                    out[f"{k}_null_reason"] = "not differentially private (infinite epsilon)"
                elif k == "epsilon_total" and math.isinf(v):
                    out[f"{k}_null_reason"] = (
                        "infinite at this delta: the failure probabilities of the count "
                        "proposals of all queries and steps exceed it")
                elif k == "epsilon_total":
                    out[f"{k}_null_reason"] = "not computed (set by for_queries)"
                else:
                    out[f"{k}_null_reason"] = "infinite" if math.isinf(v) else "not computed"
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PrivacySpent:
        """Inverse of :meth:`to_dict` (extra keys ignored; null floats read as NaN/∞)."""
        if not isinstance(data, dict):
            raise TypeError(f"privacy must be a dict; got {type(data).__name__}.")
        kw: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name not in data:
                continue
            v = data[f.name]
            if v is None:
                reason = data.get(f"{f.name}_null_reason", "")
                v = math.inf if str(reason).startswith(("infinite", "not differentially")) \
                    else math.nan
            kw[f.name] = v
        missing = {"epsilon", "delta", "steps", "dim", "gamma", "rho_per_step",
                   "accounting"} - kw.keys()
        if missing:
            raise ValueError(f"privacy record lacks the field(s) {sorted(missing)}.")
        return cls(**kw)

    def __str__(self) -> str:
        rule = {
            "rdp": "rdp (Renyi DP composed over steps, one conversion to (eps, delta))",
            "paper": (
                "paper (zCDP rule rho(eps,delta)/T)"
                if self.gamma == 0.0
                else "paper (per-step (eps/T, delta/T), basic composition)"
            ),
        }.get(self.accounting, self.accounting)
        name = f" [{self.mechanism}]" if self.mechanism else ""
        lines = [
            f"PrivacySpent{name}: ({self.epsilon:g}, {self.delta:g})-DP over "
            f"T = {self.steps} step(s), d = {self.dim}",
            f"  accounting        : {rule}",
            f"  smoothness gamma  : {self.gamma:.6g}"
            + ("  (count release: public proposed sensitivity)" if self.release == "count"
               else "  (fixed sensitivity)" if self.gamma == 0.0 else ""),
            f"  rho per step      : {self.rho_per_step:.8g}  "
            f"(total {self.rho_per_step * self.steps:.6g})",
            f"  noise multiplier  : {self.noise_multiplier:.8g}  (noise std / sensitivity)",
            f"  RDP-accounted eps : {self.epsilon_rdp:.8g} at delta = {self.delta:g}, "
            f"optimal alpha = {self.alpha_opt:.6g}",
        ]
        if self.queries > 1 or math.isfinite(self.epsilon_total):
            lines.append(
                f"  all {self.queries} queries: eps = {self.epsilon_total:.8g} at delta = "
                f"{self.delta:g} (composed over queries and steps; the eps above is per query)"
            )
        return "\n".join(lines)


def format_spent(spent: PrivacySpent) -> str:
    """The readable multi-line summary printed by ``brace account`` (``str(spent)``)."""
    return str(spent)


def _gate_grid(eps: float, dl: float, n: int) -> tuple[int, np.ndarray]:
    """``m_min = ⌈20·log(1/δ)/ε⌉`` (clipped to ``[2, n]``) and 40 log-spaced gates in
    ``[m_min, n]``."""
    m0 = int(min(max(math.ceil(GATE_RULE_MARGIN * math.log(1.0 / dl) / eps), 2), max(n, 2)))
    return m0, np.unique(np.round(np.geomspace(m0, max(n, m0), 40)))


def _count_ratio(ms: np.ndarray, spent: PrivacySpent, rho0: float) -> np.ndarray:
    """Predicted count-release noise / oracle at gates ``ms`` (median proposal ``m − M``)."""
    return ms / np.maximum(ms - spent.count_margin, 1.0) * math.sqrt(rho0 / spent.rho_per_step)


def predicted_noise_ratio(
    release: str, epsilon: float, delta: float, steps: int, *, dim: int, n: int,
) -> tuple[float, float, float | None]:
    """Predicted step noise std / oracle over gates ``m ∈ [m_min, n]`` (public values only).

    ``"smooth"``: with the gate-size γ (:func:`choose_gamma_for_gates`),
    ``gate_factor(γ, m, n)·sqrt(ρ_0/ρ(γ))``. ``"count"``: with the median proposal
    ``m − margin``, ``m/max(m − margin, 1)·sqrt(ρ_0/ρ_G)``. Returns the geometric mean over a
    log grid of 40 gate sizes, the worst ratio, and the γ (None for the count release).
    The default release (:func:`choose_release`) compares the same predictions under its
    cap on the ratio to the global mechanism.
    """
    eps, dl, t, d, _ = _check_common(epsilon, delta, steps, dim, 0.0)
    nn = check_int_at_least("n", n, 1)
    m0, ms = _gate_grid(eps, dl, nn)
    rho0 = _calibrate_rho(eps, dl, t, d, 0.0)
    if release == "smooth":
        g = _gate_rule(eps, dl, t, d, nn, m0)
        ratio = gate_factor(g, ms, nn) * math.sqrt(rho0 / _calibrate_rho(eps, dl, t, d, g))
    elif release == "count":
        ratio = _count_ratio(ms, calibrate_count(eps, dl, t, dim=d), rho0)
        g = None
    else:
        raise ValueError(f"release must be 'smooth' or 'count'; got {release!r}.")
    return float(np.exp(np.mean(np.log(ratio)))), float(ratio.max()), g


AUTO_GLOBAL_RATIO = 1.05  # the default release never adds more than this × global noise


@dataclasses.dataclass(frozen=True)
class ReleaseChoice:
    """What :func:`choose_release` picked for a BRACE call, from public values only.

    ``release``: ``"smooth"`` (certificate, smoothness ``gamma``) or ``"count"``
    (noisy-count proposal, ``count_share`` of each step's zCDP budget, a share
    ``proposal_delta`` of δ for the proposals' failures). ``predicted``: the geometric-mean
    predicted noise / oracle of each admissible candidate; ``global_ratio``: the chosen
    mode's noise bound relative to the global mechanism (≤ ``max_global_ratio``).
    """

    release: str
    gamma: float | None
    count_share: float | None
    proposal_delta: float | None
    global_ratio: float
    max_global_ratio: float
    predicted: dict

    @property
    def rule(self) -> str:
        """One line for ``params["release_rule"]``."""
        pred = ", ".join(f"{k} {v:.3g}" for k, v in self.predicted.items())
        return (f"auto: least predicted noise/oracle (geometric mean over gate sizes; {pred}) "
                f"among modes never above {self.max_global_ratio:g}x global noise")


def choose_release(
    epsilon: float, delta: float, steps: int, *, dim: int, n: int,
    max_global_ratio: float = AUTO_GLOBAL_RATIO, allow_count: bool = True,
) -> ReleaseChoice:
    """The default BRACE release, chosen from public ``(ε, δ, T, d, n)`` only
    (``docs/privacy-accounting.md`` §10).

    Two candidates, each restricted so that its noise std never exceeds
    ``max_global_ratio`` times the global mechanism's (``2r + σ`` over ``sqrt(2ρ_0)``)
    at any bank — a bound that holds at every step because both sensitivities are capped at
    ``2r + σ``:

    * smooth: the largest γ with ``sqrt(ρ_0/ρ(γ)) ≤ max_global_ratio`` (:func:`choose_gamma`
      with fraction ``1/max_global_ratio²``) — within that factor of the minimax γ over
      gate sizes restricted to the same set, since ``gate_factor`` decreases in γ;
    * count: the largest count share with ``sqrt(ρ_0/ρ_G) ≤ max_global_ratio``
      (``ρ_G = (1 − share)·ρ_s``, closed form), a tenth of δ for the proposals.

    It returns the one with the smaller geometric-mean predicted noise/oracle ratio over
    gate sizes ``m ∈ [⌈20·log(1/δ)/ε⌉, n]``; ``allow_count=False`` (the caller wants the
    boundary correction, which the count release lacks) leaves only the smooth candidate.
    Memoised; deterministic.
    """
    eps, dl, t, d, _ = _check_common(epsilon, delta, steps, dim, 0.0)
    nn = check_int_at_least("n", n, 1)
    lim = check_positive("max_global_ratio", max_global_ratio)
    if not lim > 1.0:
        raise ValueError(f"max_global_ratio must be > 1 (1 is the global mechanism itself); "
                         f"got {lim}.")
    if not isinstance(allow_count, bool):
        raise TypeError(f"allow_count must be True or False; got {allow_count!r}.")
    return _choose_release(eps, dl, t, d, nn, lim, allow_count)


AUTO_PROPOSAL_DELTA = 0.1  # share of δ given to the count proposals' failures (auto)


@functools.lru_cache(maxsize=512)
def _choose_release(eps: float, dl: float, t: int, d: int, n: int, lim: float,
                    allow_count: bool = True) -> ReleaseChoice:
    _, ms = _gate_grid(eps, dl, n)
    rho0 = _calibrate_rho(eps, dl, t, d, 0.0)
    strict = lim * (1.0 - 1e-6)  # room for the grid rounding of the bounds
    pred: dict = {}
    cand: list = []
    # The largest admissible γ: gate_factor decreases in γ and sqrt(ρ_0/ρ(γ)) ∈ [1, lim] on
    # the admissible set, so it is within lim of the constrained minimax (§10).
    g = _choose_gamma(eps, dl, t, d, 1.0 / (strict * strict))
    if g > 0.0:
        gr = math.sqrt(rho0 / _calibrate_rho(eps, dl, t, d, g))
        w = float(np.exp(np.mean(np.log(gate_factor(g, ms, n) * gr))))
        pred["smooth"] = w
        cand.append((w, "smooth", g, None, gr))
    f = AUTO_PROPOSAL_DELTA
    rho_s = _calibrate_rho(eps + math.log1p(-f * dl), (1.0 - f) * dl, t, d, 0.0)
    share = min(COUNT_SHARE_MAX, 1.0 - rho0 / (strict * strict * rho_s))
    if allow_count and share > 0.0:
        sp = calibrate_count(eps, dl, t, dim=d, count_share=share, proposal_delta=f)
        w = float(np.exp(np.mean(np.log(_count_ratio(ms, sp, rho0)))))
        pred["count"] = w
        cand.append((w, "count", None, share, math.sqrt(rho0 / sp.rho_per_step)))
    if not cand:  # a cap this close to 1 leaves no room for a positive γ or count share
        raise ValueError(f"no release mode stays within {lim:g}x global noise at "
                         f"epsilon={eps}, delta={dl}, T={t}, d={d}.")
    w, rel, gam, share, gr = min(cand, key=lambda c: c[0])
    return ReleaseChoice(rel, gam, share, f if rel == "count" else None, gr, lim, pred)


COUNT_SHARE = 0.09  # default share of the per-step zCDP budget spent on the noisy count
COUNT_PROPOSAL_DELTA = 0.5  # default share of δ for the proposals' failures (δ_c = share·δ/T)
COUNT_SHARE_MAX = 0.5  # the largest share the default release considers


def calibrate_count(
    epsilon: float, delta: float, steps: int, *, dim: int, count_share: float = COUNT_SHARE,
    proposal_delta: float = COUNT_PROPOSAL_DELTA,
) -> PrivacySpent:
    """Calibrate the count release (``docs/privacy-accounting.md`` §9) to a target (ε, δ).

    A share ``proposal_delta`` (default half) of δ is the proposals' failure probability
    (``proposal_delta·δ/T`` per step), the rest is the conversion's. The per-step zCDP
    budget ``ρ_s`` is the largest whose ``T``-fold RDP composition converts to
    ``ε + log(1 − fδ)`` at ``(1 − f)δ`` (``f = proposal_delta``); a share ``count_share`` of
    it pays for the noisy count, ``(ε_c + log(1/(1 − δ_c)))²/2 = share·ρ_s``, the rest for
    the Gaussian, ``ρ_G = (1 − share)·ρ_s``. The result is re-checked with the accountant.
    The margin ``⌈log(1/(δ_c(1 + e^{−ε_c})))/ε_c⌉`` makes ``m̃ − margin`` exceed the gate
    count with probability at most ``δ_c``. Nothing here depends on ``dim`` (the release is
    dimension-free); ``dim`` is recorded.
    """
    eps, dl, t, d, _ = _check_common(epsilon, delta, steps, dim, 0.0)
    share = check_positive("count_share", count_share)
    if not share < 1.0:
        raise ValueError(f"count_share must lie in (0, 1). Found {share}.")
    f = check_positive("proposal_delta", proposal_delta)
    if not f < 1.0:
        raise ValueError(f"proposal_delta must lie in (0, 1). Found {f}.")
    dc = f * dl / t
    target = eps + math.log1p(-f * dl)
    rho_s = _calibrate_rho(target, (1.0 - f) * dl, t, d, 0.0)
    eps_c = math.sqrt(2.0 * share * rho_s) + math.log1p(-dc)
    if not eps_c > 0.0:  # pragma: no cover - ρ_s ≫ δ for every supported ε
        raise ValueError(f"epsilon = {eps} is too small for the count release.")
    rho_g = (1.0 - share) * rho_s
    p = math.exp(-eps_c)
    margin = int(math.ceil(math.log(1.0 / (dc * (1.0 + p))) / eps_c))
    acc = RdpAccountant().compose(CountedGaussianStep(rho_g, eps_c, dc), t)
    spent, alpha = acc.get_epsilon_and_order(dl)
    if not spent <= eps * (1.0 + 1e-9):  # pragma: no cover - re-check, as calibrate_rho
        raise RuntimeError(f"calibrate_count overspends: epsilon {spent} > target {eps}.")
    return PrivacySpent(
        epsilon=eps, delta=dl, steps=t, dim=d, gamma=0.0, rho_per_step=rho_g,
        accounting="rdp", mechanism="brace", epsilon_rdp=spent, alpha_opt=alpha,
        release="count", eps_count=eps_c, delta_count=dc, count_margin=margin,
    )


def calibrate(
    epsilon: float,
    delta: float,
    steps: int,
    *,
    dim: int,
    gamma: float | None = 0.0,
    accounting: str = "rdp",
    mechanism: str = "",
) -> PrivacySpent:
    """Calibrate the per-step noise of a T-step release to a target (ε, δ).

    ``gamma=0.0``: fixed-sensitivity Gaussian steps. ``gamma=None``: choose γ with
    :func:`choose_gamma` (fraction 0.9, data independent): ``choose_gamma(ε, δ, T)``
    for ``"rdp"``, ``choose_gamma(ε/T, δ/T, 1)`` for ``"paper"`` (its per-step budget).

    ``accounting="rdp"``: per-step ρ from :func:`calibrate_rho` (RDP composition,
    exact target). ``accounting="paper"``: the paper's rules — for γ = 0 the zCDP rule
    ``ρ_step = ρ(ε, δ)/T`` (noise std ``Δ·sqrt(T/(2ρ))``); for γ > 0 per-step budgets
    ``(ε/T, δ/T)`` with basic composition, ρ_step calibrated so one smooth step is
    (ε/T, δ/T)-DP.

    >>> spent = calibrate(128.0, 1e-5, 5, dim=2, gamma=0.05, mechanism="brace")
    >>> round(spent.rho_per_step, 2), round(spent.epsilon_rdp, 6)
    (13.89, 128.0)
    """
    eps, dl, t, d, _ = _check_common(epsilon, delta, steps, dim, 0.0)
    if accounting not in ACCOUNTING_RULES:
        raise ValueError(f"accounting must be one of {ACCOUNTING_RULES}. Found {accounting!r}.")
    if not isinstance(mechanism, str):
        raise TypeError(f"mechanism must be a string. Found {mechanism!r}.")
    if gamma is None:
        # The paper's γ > 0 rule is the RDP rule applied to one step at (ε/T, δ/T), so the
        # same choice applied to that budget keeps it feasible.
        if accounting == "rdp":
            g = _choose_gamma(eps, dl, t, d)
        else:
            g = _choose_gamma(eps / t, dl / t, 1, d)
    else:
        g = _check_common(eps, dl, t, d, gamma)[4]
    if accounting == "rdp":
        rho = _calibrate_rho(eps, dl, t, d, g)
    elif g == 0.0:
        rho = rho_from_eps_delta(eps, dl) / t
    else:
        try:
            rho = _calibrate_rho(eps / t, dl / t, 1, d, g)
        except ValueError as err:
            raise ValueError(
                f"accounting='paper' makes each of the {t} steps (epsilon/T, delta/T) = "
                f"({eps / t:.6g}, {dl / t:.6g})-DP, and for that: {err}"
            ) from err
    spent, alpha = _eps_and_order(rho, t, dl, d, g)
    return PrivacySpent(
        epsilon=eps,
        delta=dl,
        steps=t,
        dim=d,
        gamma=g,
        rho_per_step=rho,
        accounting=accounting,
        mechanism=mechanism,
        epsilon_rdp=spent,
        alpha_opt=alpha,
    )
