"""The parameter arithmetic of the secure release: the discrete Gaussian's ``σ²`` as the
integers ``(t, m, m_frac)`` the exact sampler takes (``σ² = t·(m + m_frac·2⁻³⁰)``), rounded
up (more noise, never less), and its range ``σ² < 2^104``."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

MAX_SIGMA2 = 1 << 104  # σ² must stay below this (σ < 2^52): the fast path's proven range
FRAC_BITS = 30  # σ² = t·(m + m_frac·2^-30)
_MAX_T = 1 << 53  # t below this: exact in float64
_MAX_M = 1 << 62  # m below this


def _check_sigma2(tt: np.ndarray, mm: np.ndarray, ff: np.ndarray) -> None:
    """``σ² = t·(m + m_frac·2⁻³⁰) < 2^104`` exactly (floats decide all but the elements
    within a relative ``2⁻⁴⁰`` of the limit, which Python integers decide)."""
    s2 = tt.astype(np.float64) * (mm.astype(np.float64) + ff.astype(np.float64) * 2.0**-30)
    near = np.flatnonzero(s2 >= 2.0**104 * (1 - 2.0**-40))
    for i in near.tolist():
        if int(tt[i]) * ((int(mm[i]) << FRAC_BITS) | int(ff[i])) >= MAX_SIGMA2 << FRAC_BITS:
            raise ValueError(f"sigma^2 = t*(m + m_frac*2^-30) must be below 2^104; got "
                             f"{float(s2[i]):.6g}.")


def discrete_gaussian_params(sigma2: Fraction | int | float) -> tuple[int, int]:
    """Integers ``(t, m)`` with ``t·m ≥ σ²`` and ``t = ⌊sqrt(⌈σ²⌉)⌋ + 1 > σ``: the
    sampler's ``σ'² = t·m`` exceeds ``σ²`` by less than ``t`` (relative ``< 1/σ + 1/σ²``),
    and rounding σ² up only adds noise. ``σ'²`` must be below ``MAX_SIGMA2 = 2^104``."""
    t, m, m_frac = discrete_gaussian_scale(sigma2)
    m += m_frac > 0  # ⌈σ²/t⌉ = ⌈⌈σ²·2^30/t⌉/2^30⌉
    if t * m >= MAX_SIGMA2:
        raise ValueError(f"sigma^2 = {float(Fraction(sigma2)):.3g} is too large for the exact "
                         "sampler (below 2^104).")
    return t, m


def discrete_gaussian_scale(sigma2: Fraction | int | float) -> tuple[int, int, int]:
    """``(t, m, m_frac)``: the smallest ``σ'² = t·(m + m_frac·2⁻³⁰) ≥ σ²`` with
    ``t = ⌊sqrt(⌈σ²⌉)⌋ + 1`` (integers, ``0 ≤ m_frac < 2^30``), for
    :func:`sample_discrete_gaussian` ``(t, m, m_frac)``.

    ``σ'² − σ² < t·2⁻³⁰`` exactly, so the relative excess is below ``2⁻³⁰·t/σ²``; as
    ``t ≤ σ + 1 + 1/(2σ)``, that is below ``2⁻³⁰(1/σ + 1/σ² + 1/(2σ³))`` — at most
    ``2^{−28.7}/σ`` for ``σ ≥ 1``. Refused unless ``σ² > 0`` and ``σ'² < 2^104``.
    """
    s2 = Fraction(sigma2)
    if not s2 > 0:
        raise ValueError(f"sigma^2 must be > 0; got {sigma2!r}.")
    t = math.isqrt(math.ceil(s2)) + 1
    M = math.ceil(s2 * (1 << FRAC_BITS) / t)
    if t * M >= MAX_SIGMA2 << FRAC_BITS:
        raise ValueError(f"sigma^2 = {float(s2):.3g} is too large for the exact sampler "
                         "(below 2^104).")
    return t, M >> FRAC_BITS, M & ((1 << FRAC_BITS) - 1)
