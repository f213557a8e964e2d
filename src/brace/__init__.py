"""brace: differentially private retrieval from dense associative memories.

Main entry points: :class:`LSRMemory` / :class:`LSEMemory` (``docs/spec.md`` §1),
:func:`private_retrieve` (BRACE and baselines, ``docs/spec.md`` §2–§5),
:mod:`brace.accounting` (``docs/spec.md`` §4).
"""

from .mechanisms import (
    METHODS,
    CertificateTrace,
    NotPrivateWarning,
    PrivateRetrievalResult,
    certificate,
    private_retrieve,
)
from .memory import BankMutatedError, LSEMemory, LSRMemory

__version__ = "0.1.0"

__all__ = [
    "METHODS",
    "BankMutatedError",
    "CertificateTrace",
    "LSEMemory",
    "LSRMemory",
    "NotPrivateWarning",
    "PrivateRetrievalResult",
    "certificate",
    "private_retrieve",
    "__version__",
]
