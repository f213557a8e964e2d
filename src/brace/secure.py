"""Secure mode: a fixed-scale Gaussian step sampled exactly on a public grid.

``docs/privacy-accounting.md`` §13. A step with public sensitivity ``Δ`` (the count
release's ``b_t``, global's ``2r + σ_y``, the endpoint's ``2T(r + σ)``), per-step ``ρ`` and
pre-noise point ``p`` (a float vector) releases, per query:

1. the public grid unit ``g = 2^min(⌊log2 s⌋ − GRID_BITS, ⌊log2(r/√d)⌋ − GRID_R_BITS)``,
   ``s = Δ/sqrt(2ρ)`` the continuous noise std (a function of public values only);
2. ``u = round(p/g)`` ∈ ℤ^d (``p/g`` is exact: ``g`` is a power of two); for neighbours
   ``‖u − u'‖ ≤ ‖p − p'‖/g + ‖e − e'‖ ≤ Δ/g + √d`` (each rounding error ``e_j`` lies in
   ``[−1/2, 1/2]``), so ``Δ_g = Δ/g + √d`` bounds the sensitivity in grid units;
3. ``Z ~ N_Z(0, σ²)^d`` with the rational ``σ² = t·m ≥ Δ_g²/(2ρ)``
   (:func:`brace.discrete.discrete_gaussian_params`), so the step is
   ``Δ_g²/(2σ²) ≤ ρ``-zCDP (CKS 2020, Thm 15) — the accounted step, unchanged;
4. ``g·(u + Z)`` (every coordinate a grid point), then post-processing: the output
   projection onto ``B̄(q, R − g√d)`` and rounding to the grid, which stays in ``B̄(q, R)``.

The noise draws come from :mod:`brace.discrete` (every bit from :func:`os.urandom`).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from .discrete import discrete_gaussian_params, sample_discrete_gaussian

__all__ = [
    "GRID_BITS",
    "GRID_R_BITS",
    "NOISE_MODES",
    "SECURE_SEED_REASON",
    "check_noise",
    "grid_unit",
    "rounded_units",
    "secure_gaussian",
    "snap",
    "step_params",
]

NOISE_MODES = ("plain", "secure")
GRID_BITS = 20  # the noise std is between 2^20 and 2^21 grid units
GRID_R_BITS = 4  # and g·√d ≤ r/16, so the projection keeps room for the final rounding
_MAX_UNITS = float(2**52)  # |p/g| and |u + Z| stay below 2^52: exact in float64
SECURE_SEED_REASON = (
    "secure noise draws every random bit from the operating system's CSPRNG: a seed would "
    "make the noise reproducible by whoever learns it (and numpy's generators are not "
    "cryptographic). Pass seed=None, or use noise='plain' for seeded, reproducible runs.")


def check_noise(noise: Any) -> str:
    """Validate the ``noise`` argument (``"plain"`` or ``"secure"``)."""
    if not isinstance(noise, str):
        raise TypeError(f"noise must be 'plain' or 'secure' (the sampling mode, a string); "
                        f"got {type(noise).__name__}.")
    if noise not in NOISE_MODES:
        raise ValueError(f"noise must be 'plain' or 'secure'; got {noise!r}.")
    return str(noise)


def grid_unit(std: Any, r: float, d: int) -> np.ndarray:
    """The public grid unit per row: ``g = 2^min(⌊log2 s⌋ − GRID_BITS,
    ⌊log2(r/√d)⌋ − GRID_R_BITS)`` for the continuous noise std ``s`` (positive floats)."""
    s = np.asarray(std, dtype=np.float64)
    if not np.all(np.isfinite(s) & (s > 0)):
        raise ValueError("secure noise needs a finite, positive noise scale.")
    e_s = np.frexp(s)[1] - 1 - GRID_BITS  # ⌊log2 s⌋ − GRID_BITS
    e_r = math.frexp(r / math.sqrt(d))[1] - 1 - GRID_R_BITS
    return np.ldexp(1.0, np.minimum(e_s, e_r))


def _sqrt_up(d: int) -> Fraction:
    """A rational upper bound of ``√d`` (within ``2^-30``)."""
    return Fraction(math.isqrt(d << 60) + 1, 1 << 30)


def _sigma2(sens_units: float, rho: Fraction, d: int) -> tuple[int, int]:
    """``(t, m)``, ``t·m ≥ (Δ/g + √d)²/(2ρ)`` exactly (``sens_units = Δ/g`` is exact)."""
    dg = Fraction(sens_units) + _sqrt_up(d)
    return discrete_gaussian_params(dg * dg / (2 * rho))


def step_params(sensitivity: Any, rho: float, r: float, d: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The public grid ``g`` and the sampler's ``σ² = t·m`` (exact integers) per row of a
    step with sensitivity ``Δ`` (Q,) and per-step zCDP ``ρ``: ``t·m ≥ (Δ/g + √d)²/(2ρ)``."""
    sens = np.atleast_1d(np.asarray(sensitivity, dtype=np.float64))
    if not (rho > 0 and math.isfinite(rho)):
        raise ValueError(f"rho must be a finite number > 0; got {rho!r}.")
    g = grid_unit(sens / math.sqrt(2.0 * rho), r, d)
    rho_q = Fraction(rho)
    t = np.empty(sens.shape, dtype=np.int64)
    m = np.empty(sens.shape, dtype=np.int64)
    cache: dict = {}
    for i in range(sens.size):
        key = (float(sens[i]), float(g[i]))
        if key not in cache:
            cache[key] = _sigma2(key[0] / key[1], rho_q, d)
        t[i], m[i] = cache[key]
    return g, t, m


def rounded_units(pre: np.ndarray, g: np.ndarray, grid_factor: int = 1,
                  anchor: np.ndarray | None = None) -> np.ndarray:
    """``u = round(p/g)`` per row (int64; refused beyond 2^52 units). The audit's broken
    variant (``grid_factor`` > 1): ``p`` goes to the centre of its cell of a grid
    ``G = grid_factor·g`` whose cell boundaries pass through ``anchor`` (the public query:
    the worst placement), then to the grid ``g``."""
    pre = np.asarray(pre, dtype=np.float64)
    if grid_factor != 1:
        G = (g * grid_factor)[:, None]
        pre = anchor + G * (np.floor((pre - anchor) / G) + 0.5)
    units = pre / g[:, None]
    if not np.all(np.abs(units) < _MAX_UNITS):
        raise ValueError(
            "secure noise: the pre-noise point is more than 2^52 grid units from the origin "
            f"(grid {float(g.min()):.3g}); centre the bank and the queries (subtract a common "
            "offset) or rescale them.")
    return np.rint(units).astype(np.int64)


def secure_gaussian(pre: np.ndarray, sensitivity: Any, rho: float, r: float, *,
                    grid_factor: int = 1, anchor: np.ndarray | None = None,
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One secure step for each row of ``pre`` (Q, d) with public ``sensitivity`` (Q,)
    and per-step zCDP ``rho`` (module docstring, steps 1–4 before post-processing).

    Returns ``(g·(u + Z), g, σ·g)``: the unprojected release (every coordinate a grid
    point), the grid unit per row and the discrete Gaussian's σ per row in the units of
    the data. ``grid_factor`` > 1 (the audit's deliberately broken variant only) rounds
    ``p`` to a grid that many times coarser than the noise is calibrated for, with cell
    boundaries through ``anchor`` (:func:`rounded_units`).
    """
    pre = np.asarray(pre, dtype=np.float64)
    Q, d = pre.shape
    sens = np.broadcast_to(np.asarray(sensitivity, dtype=np.float64), (Q,))
    g, t, m = step_params(sens, rho, r, d)
    u = rounded_units(pre, g, grid_factor, anchor)
    z = sample_discrete_gaussian(t[:, None], np.broadcast_to(m[:, None], (Q, d)))
    k = u + z
    if not np.all(np.abs(k) < _MAX_UNITS):  # pragma: no cover - |Z| > 2^51 is impossible
        raise OverflowError("secure noise: a released point exceeds 2^52 grid units.")
    sigma = np.sqrt(t.astype(np.float64) * m.astype(np.float64)) * g
    return k.astype(np.float64) * g[:, None], g, sigma


def snap(points: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Round each row of ``points`` to its grid ``g`` (post-processing; exact)."""
    return np.rint(points / g[:, None]) * g[:, None]
