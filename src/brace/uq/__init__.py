"""Uncertainty quantification for private retrieval (``docs/spec.md`` §6; paper §5.3, Thm 4–5).

Derivation, assumptions and what an interval reveals: ``docs/uq.md``. Symbols follow
``docs/spec.md``: bank ``D = (X_1..X_n)`` i.i.d. from ``P`` (density ``f``), radius ``r``,
query ``q``,
gate ``B_t = B̄(z_{t-1}, r)``, clean trajectory ``z_t = Φ_D(z_{t-1})``, released ``Y_t``.

Two targets, two error sources, reported separately:

* **bank** ``z_t`` (noiseless retrieval on this bank). ``Y_t − z_t`` given ``D`` is the
  privacy error (the paper's ``−C_t + ξ_t``): Gaussian noise with the released per-step
  std, propagated through non-corrected steps by the Jacobian ``J_t`` of the gate mean
  (:func:`privacy_covariance`). Exact (no linearisation) for ``T = 1``, the endpoint
  method, BRACE with ``κ = 0`` and every activated BRACE step, as long as neither
  projection is active. Where the linear model is unreliable (projections; privacy noise
  so small that the lumps of the empirical map matter), :func:`analyze` simulates the
  exact conditional law by re-running the mechanism on the bank and calibrates the
  regions by conformal ranks (``privacy="auto"``, the default).
* **population** ``z̄_t`` (``z̄_0 = q``, ``z̄_t = E[X | ‖X − z̄_{t-1}‖ ≤ r]``).
  ``Y_t − z̄_t = (Y_t − z_t) + (z_t − z̄_t)``; the sampling part satisfies
  ``√n (z_{1:T} − z̄_{1:T}) ⇒ N(0, Σ)`` with ``Σ = L Γ Lᵀ`` (delta method,
  :func:`sampling_covariance`): ``Γ_{st} = E[ψ_s ψ_tᵀ]``,
  ``ψ_t(x) = 1{‖x − z̄_{t-1}‖ ≤ r}(x − z̄_t)/p_t``, ``L_{ts} = J_t J_{t-1} ⋯ J_{s+1}`` and

      J_t = (1/p_t) ∮_{‖x − z̄_{t-1}‖ = r} f(x) (x − z̄_t) ν(x)ᵀ dS(x),   ν = (x − z̄_{t-1})/r,

  the boundary-surface term of the moving gate. A nonparametric bootstrap estimates the
  same ``Σ`` independently.

:class:`MixturePopulation` gives the exact ``z̄_t``, ``J_t`` and ``Σ`` for a 2-D Gaussian
mixture (polar quadrature); :func:`analyze` turns a :class:`~brace.PrivateRetrievalResult`
and its memory into a :class:`RetrievalUQ`, whose ``confidence_region(target, level)``
returns per-step and simultaneous regions; :func:`public_region` is the variant computed
from the released ``Y`` and public parameters only.

Modules: ``population`` (the mixture model ``P``), ``sampling`` (the sampling part),
``privacy`` (the privacy part), ``regions`` (:class:`ConfidenceRegion`), ``result``
(:class:`RetrievalUQ`), ``analysis`` (:func:`analyze`, :func:`public_region`).
"""

from __future__ import annotations

from ._common import KINDS, TARGETS, UQWarning
from .analysis import analyze, public_region
from .population import MixturePopulation
from .privacy import privacy_covariance
from .regions import ConfidenceRegion
from .result import RetrievalUQ
from .sampling import BANDWIDTH_CONSTANT, SamplingCovariance, default_bandwidth, sampling_covariance

__all__ = [
    "UQWarning",
    "MixturePopulation",
    "SamplingCovariance",
    "sampling_covariance",
    "privacy_covariance",
    "ConfidenceRegion",
    "RetrievalUQ",
    "analyze",
    "public_region",
    "default_bandwidth",
    "TARGETS",
    "KINDS",
    "BANDWIDTH_CONSTANT",
]
