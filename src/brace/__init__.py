"""brace: differentially private retrieval from dense associative memories.

Main entry points: :class:`LSRMemory` / :class:`LSEMemory` (``docs/spec.md`` §1),
:func:`private_retrieve` (BRACE and baselines, ``docs/spec.md`` §2–§5),
:func:`plan_release` (what a release will do: mode, γ, calibration, without running it),
:class:`PrivateMemory` (many queries within one budget, with a persistent ledger;
``snapshot`` / :func:`private_synopsis`: a one-shot synopsis answering any number of queries),
:mod:`brace.accounting` (``docs/spec.md`` §4), :func:`load_result` (saved releases).
"""

from ._version import __version__
from .budget import BudgetExceededError, PrivateMemory, private_synopsis  # noqa: E402
from .mechanisms import (
    DEFAULT_KAPPA,
    METHODS,
    CertificateTrace,
    NotPrivateWarning,
    PrivateRetrievalResult,
    certificate,
    private_retrieve,
)
from .memory import BankMutatedError, LSEMemory, LSRMemory, frozen_bank
from .plan import ReleasePlan, plan_release
from .results import NoiselessResult, load_result, noiseless_retrieve, save_result
from .synopsis import Synopsis

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
    "Synopsis",
    "certificate",
    "frozen_bank",
    "load_result",
    "noiseless_retrieve",
    "plan_release",
    "private_retrieve",
    "private_synopsis",
    "save_result",
    "__version__",
]
