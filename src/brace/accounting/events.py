"""Event records: what a release does, described, never computed (``docs/spec.md`` §4).

As in Google ``dp-accounting``'s ``dp_event``, events are small frozen records with no
mathematics in them; event types are only ever added, never re-meant. An accountant
(:class:`brace.accounting.RdpAccountant`) turns them into a privacy guarantee.
"""

from __future__ import annotations

import dataclasses

__all__ = [
    "DpEvent",
    "GaussianStep",
    "SmoothGaussianStep",
    "CountedGaussianStep",
    "Composed",
    "SelfComposed",
    "NonPrivateEvent",
]


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


def _step_event(rho: float, gamma: float, dim: int) -> DpEvent:
    return GaussianStep(rho) if gamma == 0.0 else SmoothGaussianStep(rho, gamma, dim)
