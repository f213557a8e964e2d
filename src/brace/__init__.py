"""brace: differentially private retrieval from dense associative memories.

Main entry points: :class:`LSRMemory` / :class:`LSEMemory` (``docs/spec.md`` §1),
:func:`private_retrieve` (BRACE and baselines, ``docs/spec.md`` §2–§5),
:func:`plan_release` (what a release will do: mode, γ, calibration, without running it),
:class:`PrivateMemory` (many queries within one budget, with a persistent ledger),
:mod:`brace.accounting` (``docs/spec.md`` §4), :func:`load_result` (saved releases).
"""

from .budget import BudgetExceededError, PrivateMemory  # noqa: E402  (needs mechanisms)
from .mechanisms import (
    DEFAULT_KAPPA,
    METHODS,
    CertificateTrace,
    NotPrivateWarning,
    PrivateRetrievalResult,
    certificate,
    private_retrieve,
)
from .memory import BankMutatedError, LSEMemory, LSRMemory
from .plan import ReleasePlan, plan_release
from .results import NoiselessResult, load_result, noiseless_retrieve, save_result

__version__ = "0.1.1"

__all__ = [
    "BudgetExceededError",
    "DEFAULT_KAPPA",
    "METHODS",
    "BankMutatedError",
    "CertificateTrace",
    "LSEMemory",
    "LSRMemory",
    "NoiselessResult",
    "NotPrivateWarning",
    "PrivateMemory",
    "PrivateRetrievalResult",
    "ReleasePlan",
    "certificate",
    "load_result",
    "noiseless_retrieve",
    "plan_release",
    "private_retrieve",
    "save_result",
    "__version__",
]
