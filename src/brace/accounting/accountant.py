"""The Rényi-DP accountant: events in, one (ε, δ) out (``docs/spec.md`` §4).

:class:`RdpAccountant` turns events (:mod:`brace.accounting.events`) into a Rényi-DP curve
``α ↦ ε_RDP(α)`` (RDP adds under adaptive composition) and converts it once to (ε, δ)
(:mod:`brace.accounting.rdp`).
"""

from __future__ import annotations

import math

import numpy as np

from .._validation import check_delta, check_int_at_least, check_nonnegative
from .events import (
    Composed,
    CountedGaussianStep,
    DpEvent,
    GaussianStep,
    NonPrivateEvent,
    SelfComposed,
    SmoothGaussianStep,
)
from .primitives import _check_alpha
from .rdp import _alpha_max, _minimize_conversion, _smooth_step_rdp

__all__ = ["UnsupportedEventError", "RdpAccountant"]


class UnsupportedEventError(ValueError):
    """An accountant was asked to compose an event it cannot account for."""


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
