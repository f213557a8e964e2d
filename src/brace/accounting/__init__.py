"""Privacy accounting for BRACE: zCDP, Rényi DP of smooth-sensitivity Gaussian steps,
composition, conversion to (ε, δ) and noise calibration (``docs/spec.md`` §4).

The package follows Google ``dp-accounting`` in separating *describing* a release from
*accounting* for it, one idea per module:

* :mod:`~brace.accounting.primitives`: zCDP and the Rényi divergence of two Gaussians;
* :mod:`~brace.accounting.rdp`: the RDP curve of one smooth-sensitivity Gaussian step
  (``docs/privacy-accounting.md``, Lemma 2) and the conversion RDP → (ε, δ);
* :mod:`~brace.accounting.events`: :class:`GaussianStep`, :class:`SmoothGaussianStep`,
  :class:`CountedGaussianStep`, :class:`Composed`, :class:`SelfComposed`,
  :class:`NonPrivateEvent` — frozen records with no mathematics in them;
* :mod:`~brace.accounting.accountant`: :class:`RdpAccountant` turns events into an RDP
  curve (RDP adds under adaptive composition) and converts it once to (ε, δ);
* :mod:`~brace.accounting.filter`: the privacy filter over a fully adaptive sequence of
  releases, global or local (``docs/privacy-accounting.md`` §12): :class:`FilterSpec`,
  :class:`FootprintIndex`;
* :mod:`~brace.accounting.calibration`: :func:`calibrate_rho`, :func:`calibrate` and
  :func:`calibrate_count` return a frozen :class:`PrivacySpent`
  (:mod:`~brace.accounting.spent`) that says what a release spends.

Which γ and which release mode to use is the release policy, :mod:`brace.policy`, which
builds on this package (never the reverse).
"""

from .accountant import RdpAccountant, UnsupportedEventError
from .calibration import (
    ACCOUNTING_RULES,
    COUNT_PROPOSAL_DELTA,
    COUNT_SHARE,
    EPSILON_RANGE,
    GAMMA_MAX,
    calibrate,
    calibrate_count,
    calibrate_rho,
    epsilon_spent,
)
from .events import (
    Composed,
    CountedGaussianStep,
    DpEvent,
    GaussianStep,
    NonPrivateEvent,
    SelfComposed,
    SmoothGaussianStep,
)
from .primitives import (
    compose_zcdp,
    eps_from_rho_delta,
    gaussian_renyi_divergence,
    gaussian_zcdp,
    rho_from_eps_delta,
)
from .rdp import max_rdp_order, rdp_to_epsilon, smooth_gaussian_rdp
from .spent import NOT_PRIVATE_MECHANISMS, PrivacySpent, format_spent

__all__ = [
    # zCDP (Bun & Steinke 2016)
    "rho_from_eps_delta",
    "eps_from_rho_delta",
    "gaussian_zcdp",
    "compose_zcdp",
    # Rényi DP (Mironov 2017)
    "gaussian_renyi_divergence",
    "smooth_gaussian_rdp",
    "max_rdp_order",
    "rdp_to_epsilon",
    # events and the accountant
    "DpEvent",
    "GaussianStep",
    "SmoothGaussianStep",
    "CountedGaussianStep",
    "Composed",
    "SelfComposed",
    "NonPrivateEvent",
    "UnsupportedEventError",
    "RdpAccountant",
    # calibration
    "epsilon_spent",
    "calibrate_rho",
    "calibrate",
    "calibrate_count",
    "PrivacySpent",
    "format_spent",
    "ACCOUNTING_RULES",
    "COUNT_SHARE",
    "COUNT_PROPOSAL_DELTA",
    "EPSILON_RANGE",
    "GAMMA_MAX",
    "NOT_PRIVATE_MECHANISMS",
]
