"""Exact sampling on the integers from the operating system's randomness, and its privacy.

Secure mode (``noise="secure"``, ``docs/privacy-accounting.md`` §13) draws its noise here:

* :func:`sample_discrete_gaussian` — the discrete Gaussian ``N_Z(0, σ²)``,
  ``P(z) ∝ exp(−z²/(2σ²))`` on the integers, for a rational ``σ² = t·(m + m_frac·2⁻³⁰)``
  (Canonne, Kamath & Steinke 2020, "CKS", Algorithm 3);
* :func:`sample_two_sided_geometric` — ``P(z) ∝ exp(−ε|z|)`` on the integers for the
  rational ``ε`` a float is.

**Exactness.** Every random decision is an event ``{W < e^{−x}}`` for a uniform real
``W ∈ [0, 1)`` of which only a prefix of bits has been drawn, and an exact rational
``x ≥ 0``. The fast path (numpy, vectorised) evaluates ``e^{−x}`` in float64 with a
*proven* relative error bound ``η = 2⁻⁴⁰`` (:func:`_exp_approx`: a correctly rounded
table of ``e^{−k/256}`` times a degree-5 Taylor polynomial; every rounding counted in
its docstring) and decides only where the prefix's whole interval lies below ``lo`` or
above ``hi`` (``lo ≤ e^{−x} ≤ hi``): there the event is certain. Undecided elements get
more bits of the *same* ``W`` (vectorised: the discrete Gaussian's ≈ 0.3 % get 32 more),
and what is still undecided — about ``2⁻³⁸`` of the trials — is decided in Python against
rigorous :mod:`decimal` bounds of ``e^{−x}`` at increasing precision
(:func:`_exact_below_exp`). The output is therefore a deterministic function of exact
uniform variables, the function CKS's proofs are about; floating point only decides
which path computes it.

**Randomness.** Every random bit comes from :func:`os.urandom` through :func:`_words`
(the kernel's CSPRNG): no seed, no generator state; numpy's generators are never used.

The privacy of the discrete Gaussian (:func:`discrete_gaussian_rdp`): for integer vectors
``μ, ν`` with ``‖μ − ν‖₂ ≤ Δ``, ``D_α(μ + N_Z(0, σ²)^d ‖ ν + N_Z(0, σ²)^d) ≤ αΔ²/(2σ²)``
for every ``α > 1`` (CKS 2020, Prop. 5 and Thm 15): it is ``Δ²/(2σ²)``-zCDP, the same as
the continuous Gaussian of the same σ.

Modules: :mod:`._bits` (the random bits and the lazy uniform), :mod:`._exp` (the float64
exponential with its proven error, and the exact decisions ``W < e^{−x}``),
:mod:`.gaussian` (the discrete Gaussian sampler), :mod:`.scale` (the parameter arithmetic
of the secure release: ``σ²`` as integers ``(t, m, m_frac)``), :mod:`.geometric` (the
two-sided geometric sampler), :mod:`.laws` (the laws' pmfs and privacy).
"""

from .gaussian import sample_discrete_gaussian
from .geometric import sample_two_sided_geometric
from .laws import (
    discrete_gaussian_pmf,
    discrete_gaussian_rdp,
    discrete_gaussian_zcdp,
    two_sided_geometric_pmf,
)
from .scale import MAX_SIGMA2, discrete_gaussian_params, discrete_gaussian_scale

__all__ = [
    "MAX_SIGMA2",
    "discrete_gaussian_params",
    "discrete_gaussian_pmf",
    "discrete_gaussian_rdp",
    "discrete_gaussian_scale",
    "discrete_gaussian_zcdp",
    "sample_discrete_gaussian",
    "sample_two_sided_geometric",
    "two_sided_geometric_pmf",
]
