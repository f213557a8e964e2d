"""Noise calibration: the per-step ρ that spends exactly a target (ε, δ).

:func:`calibrate_rho` inverts the accountant (:class:`brace.accounting.RdpAccountant`) by a
bracketed root search on ``log ρ``; :func:`calibrate` (smooth or fixed-sensitivity steps) and
:func:`calibrate_count` (the count release, ``docs/privacy-accounting.md`` §9) return a
frozen :class:`brace.accounting.PrivacySpent` that says what a release spends
(``docs/spec.md`` §4). Which γ or release to use is the release policy's choice
(:mod:`brace.policy`), except the data-independent fraction rule of ``calibrate(gamma=None)``.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from .._validation import (
    check_delta,
    check_epsilon,
    check_int_at_least,
    check_nonnegative,
    check_positive,
    check_steps,
)
from .accountant import RdpAccountant
from .events import CountedGaussianStep, GaussianStep, _step_event
from .filter import ORDERS, FilterSpec, convert, event_weights
from .primitives import rho_from_eps_delta
from .spent import PrivacySpent

__all__ = [
    "ACCOUNTING_RULES",
    "EPSILON_RANGE",
    "GAMMA_MAX",
    "COUNT_SHARE",
    "COUNT_PROPOSAL_DELTA",
    "epsilon_spent",
    "calibrate_rho",
    "calibrate_count",
    "calibrate",
    "calibrate_one_shot",
    "one_shot_filter",
]

ACCOUNTING_RULES = ("rdp", "paper")

_RHO_RTOL = 1e-9  # relative tolerance of the calibrated per-step ρ
_GAMMA_RTOL = 1e-7  # relative tolerance of the γ chosen by choose_gamma


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


def _largest_feasible_log(g: Any, lo: float, hi: float, rtol: float = _RHO_RTOL) -> float:
    """The largest ``x`` (to relative ``rtol``) in ``[lo, hi]`` with ``g(log x) ≤ 0``,
    given ``g(log lo) ≤ 0 < g(log hi)`` and ``g`` nondecreasing: Brent's method on
    ``log x`` (a handful of evaluations for the smooth ``ε(ρ)`` and ``ε(γ)``, where
    bisection takes twenty to thirty), then a step back onto the feasible side if the
    root it returns is not. Only the sign of ``g`` decides what is returned."""
    a, b = math.log(lo), math.log(hi)
    if not b - a > rtol or g(a) > 0.0:  # exp(log(lo)) may be an ulp off lo
        return lo

    def capped(t: float) -> float:  # Brent's interpolation needs finite values
        return min(g(t), 1e300)

    tol = rtol / 4.0
    from scipy.optimize import brentq  # lazy: scipy.optimize is most of brace's import

    t = brentq(capped, a, b, xtol=tol, rtol=4.0 * np.finfo(float).eps, maxiter=200)
    step = tol
    while t > a and not g(t) <= 0.0:
        t = max(a, t - step)
        step *= 2.0
    return math.exp(t) if t > a else lo


@functools.lru_cache(maxsize=4096)
def _calibrate_rho(epsilon: float, delta: float, steps: int, dim: int, gamma: float) -> float:
    """Largest ρ (to relative 1e-9) with ``ε(ρ) ≤ epsilon``; inputs already validated.
    Memoised: a pure function of public scalars, which the release rule asks several
    times for one plan (the global ρ_0, the count release's ρ_s, the chosen γ's ρ)."""

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
    # ε(ρ) is continuous and nondecreasing in ρ (docs, §5): bracket on log ρ, then Brent.
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
    lo = _largest_feasible_log(lambda t: eps_of(math.exp(t)) - epsilon, lo, hi)
    # Re-check that the answer never overspends (as dp_accounting's mechanism_calibration).
    spent = eps_of(lo)
    if not spent <= epsilon:  # pragma: no cover - lo is kept feasible by construction
        raise RuntimeError(f"calibrate_rho overspends: epsilon {spent} > target {epsilon}.")
    return lo


def calibrate_rho(
    epsilon: float, delta: float, steps: int, *, dim: int = 1, gamma: float = 0.0
) -> float:
    """Per-step ρ whose T-fold composition spends exactly (ε, δ) under RDP accounting.

    Brent's method on ``log ρ`` to relative tolerance 1e-9, returning the feasible end, so
    ``epsilon_spent(ρ, T, δ, dim=d, gamma=γ) ≤ ε`` always holds (re-checked). With
    γ > 0 the variance term spends ε even as ρ → 0; if that floor already reaches the
    target, no ρ works and a ``ValueError`` says so.

    >>> round(calibrate_rho(128.0, 1e-5, 5, dim=2, gamma=0.05), 2)
    13.89
    """
    eps, dl, t, d, g = _check_common(epsilon, delta, steps, dim, gamma)
    return _calibrate_rho(eps, dl, t, d, g)


def _choose_gamma(eps: float, dl: float, t: int, d: int, f: float = 0.9) -> float:
    """The rule of :func:`brace.policy.choose_gamma` on validated inputs: the largest γ
    with ``calibrate_rho(γ) ≥ f·ρ_0``. It lives here because ``calibrate(gamma=None)``
    applies it; the policy imports it from here."""
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
    while lo == 0.0:  # halve down to a feasible γ; below 1e-12, γ = 0 (global)
        if hi / 2.0 < 1e-12:
            return 0.0
        if feasible(hi / 2.0):
            lo = hi / 2.0
        else:
            hi = hi / 2.0

    def excess(log_g: float) -> float:
        return _eps_and_order(target_rho, t, dl, d, math.exp(log_g))[0] - eps

    return _largest_feasible_log(excess, lo, hi, _GAMMA_RTOL)


COUNT_SHARE = 0.09  # default share of the per-step zCDP budget spent on the noisy count
COUNT_PROPOSAL_DELTA = 0.5  # default share of δ for the proposals' failures (δ_c = share·δ/T)


def _count_rho(eps: float, dl: float, t: int, d: int, f: float) -> float | None:
    """Per-step zCDP budget ``ρ_s`` of the count release (§9) on validated inputs: the
    largest whose ``T``-fold composition converts to ``ε + log(1 − fδ)`` at ``(1 − f)δ``.
    None where that target is not positive (``ε ≤ log(1/(1 − fδ))``): the proposals'
    share ``f`` of δ then costs all of ε and no count release exists."""
    target = eps + math.log1p(-f * dl)
    if not target > 0.0:
        return None
    return _calibrate_rho(target, (1.0 - f) * dl, t, d, 0.0)


def _count_epsilon(rho_s: float, share: float, dc: float) -> float:
    """``ε_c`` of the noisy count: ``(ε_c + log(1/(1 − δ_c)))²/2 = share·ρ_s`` (§9); the
    count release needs it > 0."""
    return math.sqrt(2.0 * share * rho_s) + math.log1p(-dc)


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

    The release needs ``ε > log(1/(1 − fδ))`` (about ``fδ``) and ``ε_c > 0``; where either
    fails, a ``ValueError`` names the constraint (the smooth release has no such floor).
    """
    eps, dl, t, d, _ = _check_common(epsilon, delta, steps, dim, 0.0)
    share = check_positive("count_share", count_share)
    if not share < 1.0:
        raise ValueError(f"count_share must lie in (0, 1). Found {share}.")
    f = check_positive("proposal_delta", proposal_delta)
    if not f < 1.0:
        raise ValueError(f"proposal_delta must lie in (0, 1). Found {f}.")
    dc = f * dl / t
    rho_s = _count_rho(eps, dl, t, d, f)
    if rho_s is None:
        raise ValueError(
            f"the count release cannot be calibrated at epsilon = {eps}, delta = {dl}: its "
            f"proposals' failures take the share proposal_delta = {f:g} of delta, which "
            f"costs log(1/(1 - proposal_delta*delta)) = {-math.log1p(-f * dl):.6g} of "
            "epsilon, so it needs epsilon > log(1/(1 - proposal_delta*delta)). Use "
            "release='smooth' (or 'auto'), a larger epsilon, or a smaller delta."
        )
    eps_c = _count_epsilon(rho_s, share, dc)
    if not eps_c > 0.0:
        raise ValueError(
            f"the count release cannot be calibrated at epsilon = {eps}, delta = {dl}, "
            f"T = {t}: the noisy count's share count_share = {share:g} of the per-step "
            f"budget rho_s = {rho_s:.6g} buys eps_count = sqrt(2*count_share*rho_s) - "
            f"log(1/(1 - delta_c)) = {eps_c:.6g}, but it must be > 0 (delta_c = "
            f"proposal_delta*delta/T = {dc:.6g}). Use release='smooth' (or 'auto'), a larger "
            "epsilon or count_share, or a smaller delta."
        )
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

    ``gamma=0.0``: fixed-sensitivity Gaussian steps. ``gamma=None``: choose γ with the rule
    of :func:`brace.policy.choose_gamma` (fraction 0.9, data independent):
    ``choose_gamma(ε, δ, T)`` for ``"rdp"``, ``choose_gamma(ε/T, δ/T, 1)`` for ``"paper"``
    (its per-step budget).

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


def _one_shot_eps(rho: float, delta: float) -> float:
    return convert(event_weights(GaussianStep(rho)), delta)


def _calibrate_one_shot(epsilon: float, delta: float) -> tuple[float, int]:
    # the conversion at ρ is min_α (αρ − B_α) + ε ≤ ε iff ρ ≤ max_α B_α/α: the closed form,
    # less a hair so that its rounding stays on the feasible side
    f = FilterSpec.for_budget(epsilon, delta, n_orders=1, delta_direct=0.0)
    i = f.orders[0]
    rho = float(f.thresholds[0] / ORDERS[i]) * (1.0 - 1e-12)
    while not _one_shot_eps(rho, delta) <= epsilon:  # pragma: no cover - the hair suffices
        rho *= 1.0 - 1e-9
    return rho, i


def calibrate_one_shot(epsilon: float, delta: float) -> tuple[float, int]:
    """The largest total zCDP ``ρ`` of Gaussian releases fixed before the data is read
    whose composition — the event ``GaussianStep(ρ)``, whatever the split — converts to
    at most ``epsilon`` at ``delta`` by the conversion the library reports
    (:func:`brace.accounting.filter.convert`: ``docs/privacy-accounting.md`` §5 minimised
    over the grid ``ORDERS``), and the index into ``ORDERS`` of the order that
    certifies it (where the conversion at ``ρ`` is smallest).

    The closed form ``ρ = max_α B_α/α`` (less a relative 10⁻¹², so that the conversion
    at ``ρ`` never exceeds ``epsilon``), ``B_α`` the threshold of the one-order filter
    with ``Δ = 0`` at ``α`` (:func:`one_shot_filter`). Validated as :func:`calibrate_rho`.

    >>> rho, i = calibrate_one_shot(1.0, 1e-5)
    >>> round(rho, 4), round(float(ORDERS[i]), 1)
    (0.0305, 17.4)
    """
    eps, dl, _, _, _ = _check_common(epsilon, delta, 1, 1, 0.0)
    return _calibrate_one_shot(eps, dl)


def one_shot_filter(epsilon: float, delta: float) -> FilterSpec:
    """The filter of one call of Gaussian releases priced before the data is read
    (``brace.private_synopsis``, ``docs/privacy-accounting.md`` §14): the single order
    ``G = {α}`` of :func:`calibrate_one_shot` and no direct-δ share (``Δ = 0``), so it
    admits a total ``ρ`` up to the one :func:`calibrate_one_shot` returns (Theorem 6 with
    ``|G| = 1``: the conversion at ``α`` is at the full δ). A public function of
    ``(ε, δ)``."""
    eps, dl, _, _, _ = _check_common(epsilon, delta, 1, 1, 0.0)
    return FilterSpec.for_budget(eps, dl, n_orders=1, delta_direct=0.0)
