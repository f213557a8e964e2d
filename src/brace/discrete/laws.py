"""The laws of the exact samplers and their privacy: the pmfs of the discrete Gaussian and
the two-sided geometric, and the discrete Gaussian mechanism's zCDP and RDP
(CKS 2020, Prop. 5 and Thm 15)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def _theta(sigma2: float, kmax: int) -> float:
    k = np.arange(-kmax, kmax + 1, dtype=np.float64)
    return float(np.exp(-k * k / (2.0 * sigma2)).sum())


def discrete_gaussian_pmf(k: Any, sigma2: float) -> np.ndarray:
    """``P(Z = k)`` for ``Z ~ N_Z(0, σ²)`` (float64; the normaliser summed to ``±40σ``)."""
    s2 = float(sigma2)
    kk = np.asarray(k, dtype=np.float64)
    kmax = int(math.ceil(40.0 * math.sqrt(s2))) + 1
    return np.exp(-kk * kk / (2.0 * s2)) / _theta(s2, kmax)


def two_sided_geometric_pmf(k: Any, epsilon: float) -> np.ndarray:
    """``P(Z = k) = tanh(ε/2)·exp(−ε|k|)`` (``(1 − p)/(1 + p)·p^|k|``, ``p = e^{−ε}``)."""
    kk = np.abs(np.asarray(k, dtype=np.float64))
    return math.tanh(epsilon / 2.0) * np.exp(-epsilon * kk)


def discrete_gaussian_zcdp(sensitivity: float, sigma2: float) -> float:
    """ρ of adding ``N_Z(0, σ²)^d`` to an integer-valued query of L2 sensitivity ``Δ``:
    ``Δ²/(2σ²)`` (CKS 2020, Thm 15)."""
    s2 = float(sigma2)
    if not s2 > 0:
        raise ValueError(f"sigma2 must be > 0; got {sigma2!r}.")
    return float(sensitivity) ** 2 / (2.0 * s2)


def discrete_gaussian_rdp(alpha: Any, sensitivity: float, sigma2: float) -> np.ndarray:
    """RDP bound ``α·Δ²/(2σ²)`` of the discrete Gaussian mechanism at orders ``α > 1``
    (CKS 2020, Prop. 5 per coordinate; additive over independent coordinates, and the
    bound is increasing in each squared shift, so ``Σ_j (μ_j − ν_j)² ≤ Δ²`` gives it)."""
    a = np.asarray(alpha, dtype=np.float64)
    if np.any(~(a > 1.0)):
        raise ValueError("alpha must be > 1.")
    return a * discrete_gaussian_zcdp(sensitivity, sigma2)
