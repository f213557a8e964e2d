"""Noise on an exact integer statistic (the synopsis's releases, ``docs/privacy-accounting.md``
§14–§15): the exact discrete Gaussian from the operating system (``noise="secure"``) or a
numpy Gaussian of the same σ (``noise="plain"``), both ``ρ``-zCDP for a statistic of L2
sensitivity ``Δ`` (Canonne, Kamath & Steinke 2020, Thm 15; Bun & Steinke 2016, Prop. 1.6)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .discrete import discrete_gaussian_scale, sample_discrete_gaussian

__all__ = ["noisy_integers"]


def noisy_integers(stat: np.ndarray, sensitivity_units: float, rho: float, noise: str,
                   rng: np.random.Generator | None) -> tuple[np.ndarray, float]:
    """``stat`` (an integer array of L2 sensitivity ``Δ`` units) plus Gaussian noise of
    zCDP ``ρ``: ``noise="secure"``: the exact discrete Gaussian ``N_Z(0, σ²)`` with the
    rational ``σ² ≥ Δ²/(2ρ)`` (rounded up; every bit from the operating system);
    ``"plain"``: ``N(0, σ²)``, ``σ = Δ/sqrt(2ρ)``, from ``rng``. Returns the noisy
    statistic (float64, exact below ``2^53``) and σ, both in units."""
    stat = np.asarray(stat, dtype=np.int64)
    if noise == "secure":
        s2 = Fraction(float(sensitivity_units)) ** 2 / (2 * Fraction(float(rho)))
        t, m, f = discrete_gaussian_scale(s2)
        t_, m_, f_ = (np.broadcast_to(np.int64(v), stat.shape) for v in (t, m, f))
        z = sample_discrete_gaussian(t_, m_, f_)
        return (stat + z).astype(np.float64), math.sqrt(t * (m + f * 2.0**-30))
    sigma = float(sensitivity_units) / math.sqrt(2.0 * float(rho))
    return stat.astype(np.float64) + sigma * rng.standard_normal(stat.shape), sigma
