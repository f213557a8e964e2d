"""zCDP and Rényi-DP primitives of the Gaussian mechanism (``docs/spec.md`` §4).

* zCDP (Bun & Steinke 2016): the ρ of the Gaussian mechanism, additive composition and the
  conversion between ρ-zCDP and (ε, δ)-DP (Prop. 1.3, 1.6; Lemma 1.7);
* the Rényi divergence between two Gaussians with different means and variances (Gil,
  Alajaji & Linder 2013; ``docs/privacy-accounting.md``, Lemma 1), on which the RDP curve of
  a smooth-sensitivity step (:mod:`brace.accounting.rdp`) is built.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from .._validation import (
    check_delta,
    check_epsilon,
    check_int_at_least,
    check_nonnegative,
    check_positive,
)

__all__ = [
    "rho_from_eps_delta",
    "eps_from_rho_delta",
    "gaussian_zcdp",
    "compose_zcdp",
    "gaussian_renyi_divergence",
]


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
