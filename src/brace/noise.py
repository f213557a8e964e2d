"""The noise of a release, a strategy chosen once per call from the plan's noise mode.

* :class:`PlainNoise` — numpy's float64 samplers from a seeded ``numpy.random.Generator``:
  reproducible, for experiments. Its low bits can reveal the pre-noise point
  (``docs/audit.md`` §9), so it is what a call with a ``seed`` gets, never the default
  without one.
* :class:`SecureNoise` — exact discrete noise on a public grid from the operating system
  (:mod:`brace.secure`, ``docs/privacy-accounting.md`` §13): what a call without a seed
  gets (``noise="auto"``).

Both offer the two draws a release makes: the count release's noisy gate counts
(:meth:`counts`) and a Gaussian step around a pre-noise point (:meth:`gaussian`); the
step pipeline (:mod:`brace.steps`) does not know which one it holds.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import secure as _secure
from .discrete import sample_two_sided_geometric

__all__ = ["PlainNoise", "SecureNoise", "make_noise", "resolve_noise"]


def resolve_noise(noise: str, seeded: bool) -> tuple[str, str]:
    """``(mode, rule)``: ``"auto"`` is ``"secure"`` without a seed and ``"plain"`` with one
    (reproducible experiments); ``"plain"`` and ``"secure"`` are as given, and
    ``"secure"`` with a seed is refused (:data:`brace.secure.SECURE_SEED_REASON`)."""
    if noise == "secure" and seeded:
        raise ValueError(f"seed must be None with noise='secure': {_secure.SECURE_SEED_REASON}")
    if noise == "auto":
        return ("plain", "auto: plain (a seed was given: reproducible)") if seeded else \
            ("secure", "auto: secure (no seed: exact noise from the OS)")
    return noise, "given"


class PlainNoise:
    """Seeded float64 noise. The draws are made up front in a fixed order — the standard
    normal innovations ``(Q, R, d)`` first, then the count release's two-sided geometric
    noise ``(Q, T)`` — so two calls with the same seed and shapes share their
    innovations (the paper's naive-vs-BRACE comparison)."""

    name = "plain"
    grid = False

    def __init__(self, rng: np.random.Generator | None, *, shape: tuple[int, int, int],
                 steps: int, count_steps: int = 0, eps_count: float = 0.0,
                 innovations: np.ndarray | None = None) -> None:
        Q, R, d = shape  # R releases per query: T, or 1 for the endpoint method
        if innovations is not None:
            self._xi = innovations
        else:  # (Q, T, d) whatever R: the endpoint method takes the last step's draws
            self._xi = rng.standard_normal((Q, steps, d))[:, steps - R:]
        self._counts = None
        if count_steps:
            p = math.exp(-eps_count)  # two-sided geometric: P(z) ∝ p^|z|
            self._counts = (rng.geometric(1.0 - p, (Q, count_steps))
                            - rng.geometric(1.0 - p, (Q, count_steps)))

    def counts(self, t: int) -> np.ndarray:
        """The two-sided geometric noise of step ``t`` (1-based), one per query."""
        return self._counts[:, t - 1]

    def gaussian(self, t: int, pre: np.ndarray, sens: np.ndarray, mult: float, **_: Any
                 ) -> tuple[np.ndarray, np.ndarray, None]:
        """``(pre + s·ξ_t, s, None)``, ``s = sens·mult`` per query."""
        std = sens * mult
        return pre + std[:, None] * self._xi[:, t - 1], std, None


class SecureNoise:
    """Exact discrete noise from the operating system on the public grid of each step
    (:func:`brace.secure.secure_gaussian`); exact two-sided geometric counts. No seed
    and no generator state exist. ``grid_factor`` > 1 is the audit's broken variant."""

    name = "secure"
    grid = True

    def __init__(self, *, rho: float, eps_count: float = 0.0, shape: tuple[int, int, int],
                 count_steps: int = 0, grid_factor: int = 1) -> None:
        self._rho = rho
        self._grid_factor = grid_factor
        self._counts = None
        if count_steps:  # exact, P(z) ∝ exp(−ε_c|z|), for ε_c as the rational it is
            self._counts = sample_two_sided_geometric(eps_count, (shape[0], count_steps))

    def counts(self, t: int) -> np.ndarray:
        return self._counts[:, t - 1]

    def gaussian(self, t: int, pre: np.ndarray, sens: np.ndarray, mult: float, *,
                 g: np.ndarray, data_dependent: bool, anchor: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(g·(u + Z), σ·g, g)`` on the public grid ``g`` (Q,)."""
        y, std = _secure.secure_gaussian(pre, sens, self._rho, g,
                                         data_dependent=data_dependent,
                                         grid_factor=self._grid_factor, anchor=anchor)
        return y, std, g


def make_noise(plan: Any, *, rng: np.random.Generator | None, shape: tuple[int, int, int],
               innovations: np.ndarray | None = None, grid_factor: int = 1
               ) -> PlainNoise | SecureNoise:
    """The call's noise strategy, as the plan says (``plan.noise``)."""
    count = plan.release == "count"
    T = plan.steps if count else 0
    if plan.noise == "secure":
        return SecureNoise(rho=plan.spent.rho_per_step, eps_count=plan.eps_count,
                           shape=shape, count_steps=T, grid_factor=grid_factor)
    return PlainNoise(rng, shape=shape, steps=plan.steps, count_steps=T,
                      eps_count=plan.eps_count, innovations=innovations)
