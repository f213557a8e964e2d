"""Secure noise: a Gaussian step sampled exactly on a public grid.

``docs/privacy-accounting.md`` §13. A step with sensitivity ``Δ`` (public for the count
release's ``b_t``, global's ``2r + σ_y`` and the endpoint's ``2T(r + σ)``; the smooth
certificate ``Δ̄_t`` or the naive ``2r/max(1, m_t)`` when it depends on the data), per-step
``ρ`` and pre-noise point ``p ∈ ℝ^d`` releases, per query:

1. the public grid unit ``g = 2^min(⌊log2 s⌋ − GRID_BITS, ⌊log2(r/√d)⌋ − GRID_R_BITS)``
   with ``s = floor·multiplier`` for a public lower bound ``floor ≤ Δ`` (``floor = Δ``
   when ``Δ`` is public; ``2r/n`` for the smooth and naive scales), so ``g`` is a function
   of public values only and ``Δ·multiplier/g ≥ 2^GRID_BITS``;
2. ``u = round(p/g) ∈ ℤ^d`` (``p/g`` is exact: ``g`` is a power of two); for neighbours
   ``‖u − u'‖ ≤ ‖p − p'‖/g + √d`` (Lemma 7), so ``S = Δ/g + √d`` bounds the sensitivity in
   grid units;
3. ``Z ~ N_Z(0, σ²)^d`` with the rational ``σ² ≥ S²/(2ρ)`` (fixed scale, Theorem 8) or
   ``σ² ≥ (1 + κ)·S²/(2ρ)``, ``κ = 2^-40`` (data-dependent scale, Theorem 11: the
   inflation pays for the discrete normalisers), drawn exactly
   (:func:`brace.discrete.sample_discrete_gaussian`, every bit from :func:`os.urandom`);
4. ``g·(u + Z)``, then post-processing: the output projection onto ``B̄(q, R − g√d)`` and
   rounding to the grid, which stays in ``B̄(q, R)``.

Whether a call may use the grid is decided from public values before the bank is read
(:func:`check_grid_range`): ``|p/g| < 2^61`` for every pre-noise point the call can
produce, so ``u + Z`` never leaves int64 (``|Z| < 2^62`` by the sampler).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from .discrete import discrete_gaussian_scale, sample_discrete_gaussian

__all__ = [
    "GRID_BITS",
    "GRID_R_BITS",
    "MAX_SECURE_SMOOTH_N",
    "MIN_SECURE_GAMMA",
    "NOISE_MODES",
    "SECURE_SEED_REASON",
    "SMOOTH_INFLATION",
    "SMOOTH_RATE_MARGIN",
    "check_grid_range",
    "check_noise",
    "grid_unit",
    "rounded_units",
    "secure_gaussian",
    "sigma2_params",
    "snap",
]

NOISE_MODES = ("auto", "plain", "secure")
GRID_BITS = 20  # the noise std is at least 2^20 grid units
GRID_R_BITS = 4  # and g·√d ≤ r/16, so the projection keeps room for the final rounding
_MAX_UNITS = 2.0**61  # |p/g| below this (public, checked up front): u + Z stays in int64
#: κ of Theorem 11: a data-dependent scale's σ² is inflated by 1 + κ
SMOOTH_INFLATION = Fraction(1, 2**40)
#: the smooth certificate's rate is γ − this in secure mode (room for σ²'s rational rounding)
SMOOTH_RATE_MARGIN = 2.0**-30
#: Theorem 11 needs α_max(γ) ≤ 2^30 and σ ≤ 2^52 grid units (n·2^21 at most)
MIN_SECURE_GAMMA = 1e-9
MAX_SECURE_SMOOTH_N = 2**30
SECURE_SEED_REASON = (
    "secure noise draws every random bit from the operating system's CSPRNG: a seed would "
    "make the noise reproducible by whoever learns it (and numpy's generators are not "
    "cryptographic). Pass seed=None, or noise='plain' with a seed for reproducible runs.")


def check_noise(noise: Any) -> str:
    """Validate the ``noise`` argument (``"auto"``, ``"plain"`` or ``"secure"``)."""
    if not isinstance(noise, str):
        raise TypeError("noise must be 'auto', 'plain' or 'secure' (the sampling mode, a "
                        f"string); got {type(noise).__name__}.")
    if noise not in NOISE_MODES:
        raise ValueError(f"noise must be 'auto', 'plain' or 'secure'; got {noise!r}.")
    return str(noise)


def grid_unit(std_floor: Any, r: float, d: int) -> np.ndarray:
    """The public grid unit per row: ``g = 2^min(⌊log2 s⌋ − GRID_BITS,
    ⌊log2(r/√d)⌋ − GRID_R_BITS)`` for a public lower bound ``s`` of the noise std."""
    s = np.asarray(std_floor, dtype=np.float64)
    if not np.all(np.isfinite(s) & (s > 0)):
        raise ValueError("secure noise needs a finite, positive noise scale.")
    e_s = np.frexp(s)[1] - 1 - GRID_BITS  # ⌊log2 s⌋ − GRID_BITS
    e_r = math.frexp(r / math.sqrt(d))[1] - 1 - GRID_R_BITS
    return np.ldexp(1.0, np.minimum(e_s, e_r))


def check_grid_range(reach: Any, g: Any) -> None:
    """Refuse, from public values and before the bank is read, a call whose pre-noise
    points could reach ``2^61`` grid units: ``reach`` bounds ``‖p‖_∞`` (the query's scale
    plus how far the call can move), ``g`` the finest grid it can use."""
    units = np.asarray(reach, dtype=np.float64) / np.asarray(g, dtype=np.float64)
    if not np.all(units < _MAX_UNITS):
        raise ValueError(
            "secure noise: the call's points can lie more than 2^61 grid units from the "
            f"origin (grid {float(np.min(g)):.3g}, max |coordinate| reach "
            f"{float(np.max(reach)):.3g}); centre the bank and the queries (subtract a "
            "common offset) or rescale them.")


def _sqrt_up(d: int) -> Fraction:
    """A rational upper bound of ``√d`` (within ``2^-30``)."""
    return Fraction(math.isqrt(d << 60) + 1, 1 << 30)


def _dyadic(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``x = a·2^e`` exactly for finite floats: ``a`` int64 (``|a| < 2^53``), ``e`` int64."""
    frac, e = np.frexp(x)
    return (frac * 2.0**53).astype(np.int64), e.astype(np.int64) - 53


def _isqrt_exact(c: np.ndarray) -> np.ndarray:
    """``⌊√c⌋`` (int64) for Python integers ``0 ≤ c ≤ 2^104`` (an object array): the float
    ``fl(√fl(c))`` is within ``1.5u·√c ≤ 3/4`` of ``√c`` (two correct roundings), so its
    floor ``k̂`` is ``k`` or ``k ± 1``; the exact residual ``r = c − k̂²`` (``|r| < 2^54``)
    decides which. Elements the check does not confirm (none, by the bound) go to
    :func:`math.isqrt`."""
    k = np.floor(np.sqrt(c.astype(np.float64))).astype(np.int64)
    r = (c - k.astype(object) ** 2).astype(np.int64)
    lo = r < 0
    hi = r > 2 * k
    r = np.where(lo, r + 2 * k - 1, np.where(hi, r - 2 * k - 1, r))
    k = k - lo + hi
    bad = (r < 0) | (r > 2 * k)
    for i in np.flatnonzero(bad).tolist():  # pragma: no cover - excluded by the bound
        k[i] = math.isqrt(int(c[i]))
    return k


def sigma2_params(sensitivity: Any, g: Any, rho: float, d: int, *,
                  data_dependent: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sampler's ``σ² = t·(m + m_frac·2^-30)`` per row (exact integers) with
    ``σ² ≥ (1 + κ·[data_dependent])·(Δ/g + √d)²/(2ρ)`` (``Δ/g`` is exact; ``κ`` is
    :data:`SMOOTH_INFLATION`), rounded up by a relative ``2^-29/σ`` at most: for each row,
    :func:`brace.discrete.discrete_gaussian_scale` of that rational, vectorised.

    Exact integer arithmetic on all rows at once: with ``Δ = a·2^e``, ``g = b·2^f`` (``b``
    odd) and ``√d ≤ R·2^-30`` (:func:`_sqrt_up`), ``Δ/g + R·2^-30 = N/(b·2^{30+K})``,
    ``N = a·2^{e−f+30+K} + R·b·2^K`` (``K ≥ 0`` common, so every shift is ≥ 0); with the
    factor ``(1 + κ)/(2ρ) = p/q``, ``σ² = N²p/D``, ``D = q·b²·2^{60+2K}``. Then ``t =
    ⌊√⌈N²p/D⌉⌋ + 1`` and ``M = ⌈N²p·2^30/(D·t)⌉`` (``m = ⌊M/2^30⌋``, ``m_frac = M mod
    2^30``) in Python integers held in numpy object arrays; ``tests/test_sigma2_params.py``
    compares every output with the per-row :class:`~fractions.Fraction` reference.
    """
    sens = np.atleast_1d(np.asarray(sensitivity, dtype=np.float64))
    gg = np.broadcast_to(np.asarray(g, dtype=np.float64), sens.shape)
    if not (rho > 0 and math.isfinite(rho)):
        raise ValueError(f"rho must be a finite number > 0; got {rho!r}.")
    if not np.all(np.isfinite(sens)):
        raise ValueError("sensitivity must be finite; got "
                         f"{sens[~np.isfinite(sens)][0]!r}.")
    if not np.all(np.isfinite(gg) & (gg > 0)):
        raise ValueError("g (the grid unit) must be a finite number > 0; got "
                         f"{gg[~(np.isfinite(gg) & (gg > 0))][0]!r}.")
    shape = sens.shape
    if sens.size == 0:
        return tuple(np.empty(shape, dtype=np.int64) for _ in range(3))
    factor = (1 + SMOOTH_INFLATION if data_dependent else Fraction(1)) / (2 * Fraction(rho))
    root_d = _sqrt_up(d)
    R = root_d.numerator * ((1 << 30) // root_d.denominator)  # √d ≤ R·2^-30
    a, e = _dyadic(sens.ravel())
    b, f = _dyadic(gg.ravel())
    tz = np.frexp((b & -b).astype(np.float64))[1] - 1  # trailing zeros of b (b > 0)
    b, f = b >> tz, f + tz  # b odd (a power of two: b = 1)
    sh = np.where(a == 0, 0, e - f + 30)
    K = max(0, -int(sh.min()))
    sh += K
    unit_b = bool(np.all(b == 1))
    if unit_b and int(sh.max()) <= 9 and R << K < 1 << 61:  # int64 is exact: < 2^63
        N = ((a << sh) + (R << K) * b).astype(object)
    else:
        N = (a.astype(object) << sh.astype(object)) + (R << K) * b.astype(object)
    num = N * N * factor.numerator
    D = factor.denominator << (60 + 2 * K)
    if not unit_b:
        D = D * b.astype(object) ** 2
    if not np.all(num > 0):
        raise ValueError("sigma^2 must be > 0; got 0 (a zero sensitivity in grid units "
                         "plus sqrt(d)).")
    c2 = (num + (D - 1)) // D  # ⌈σ²⌉
    if np.any(c2 >= 1 << 103):  # else t·M ≤ σ²·2^30 + t < 2^134: within the range
        Nb, Db = np.broadcast_to(num, c2.shape), np.broadcast_to(D, c2.shape)
        for i in np.flatnonzero(c2 >= 1 << 103).tolist():  # raises for the first one
            discrete_gaussian_scale(Fraction(int(Nb.flat[i]), int(Db.flat[i])))
    t = _isqrt_exact(c2) + 1
    Dt = D * t.astype(object)
    M = ((num << 30) + (Dt - 1)) // Dt  # ⌈σ²·2^30/t⌉
    try:
        Mi = M.astype(np.int64)
        m, mf = Mi >> 30, Mi & ((1 << 30) - 1)
    except OverflowError:  # M ≥ 2^63 (σ beyond about 2^33)
        m, mf = (M >> 30).astype(np.int64), (M & ((1 << 30) - 1)).astype(np.int64)
    return t.reshape(shape), m.reshape(shape), mf.reshape(shape)


def rounded_units(pre: np.ndarray, g: np.ndarray, grid_factor: int = 1,
                  anchor: np.ndarray | None = None) -> np.ndarray:
    """``u = round(p/g)`` per row (int64; the range was checked from public values). The
    audit's broken variant (``grid_factor`` > 1): ``p`` goes to the centre of its cell of
    a grid ``G = grid_factor·g`` whose cell boundaries pass through ``anchor`` (the public
    query: the worst placement), then to the grid ``g``."""
    pre = np.asarray(pre, dtype=np.float64)
    if grid_factor != 1:
        G = (g * grid_factor)[:, None]
        pre = anchor + G * (np.floor((pre - anchor) / G) + 0.5)
    units = np.rint(pre / g[:, None])
    if not np.all(np.abs(units) < _MAX_UNITS):  # pragma: no cover - excluded up front
        raise AssertionError("secure noise: a pre-noise point beyond the checked range.")
    return units.astype(np.int64)


def secure_gaussian(pre: np.ndarray, sensitivity: Any, rho: float, g: np.ndarray, *,
                    data_dependent: bool, grid_factor: int = 1,
                    anchor: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One secure step for each row of ``pre`` (Q, d) on the public grid ``g`` (Q,)
    (module docstring, steps 2–4 before post-processing).

    Returns ``(g·(u + Z), σ·g)``: the unprojected release (every coordinate a multiple of
    its row's ``g``; ``float(u + Z)·g`` is a public function of the integers) and the
    discrete Gaussian's σ per row in the units of the data. ``grid_factor`` > 1 (the
    audit's deliberately broken variant only) rounds ``p`` to a grid that many times
    coarser than the noise is calibrated for, with cell boundaries through ``anchor``.
    """
    pre = np.asarray(pre, dtype=np.float64)
    Q, d = pre.shape
    sens = np.broadcast_to(np.asarray(sensitivity, dtype=np.float64), (Q,))
    t, m, f = sigma2_params(sens, g, rho, d, data_dependent=data_dependent)
    u = rounded_units(pre, g, grid_factor, anchor)
    z = sample_discrete_gaussian(t[:, None], np.broadcast_to(m[:, None], (Q, d)),
                                 np.broadcast_to(f[:, None], (Q, d)))
    k = u + z  # |u| < 2^61 and |z| < 2^62: no int64 overflow
    sigma = np.sqrt(t.astype(np.float64) * (m + f * 2.0**-30)) * g
    return k.astype(np.float64) * g[:, None], sigma


def snap(points: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Round each row of ``points`` to its grid ``g`` (post-processing)."""
    return np.rint(points / g[:, None]) * g[:, None]
