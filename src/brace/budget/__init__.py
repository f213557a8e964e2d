"""``PrivateMemory``: a bank that only answers privately, within one budget.

The package, by idea (``docs/architecture.md``): :mod:`.facade` (the public class,
:meth:`~PrivateMemory.retrieve`, :func:`private_synopsis`), :mod:`.admission` (pricing
through the privacy filter, :class:`BudgetExceededError`), :mod:`.sync` (the ledger's
state kept in step), :mod:`.snapshot` (the one-shot synopsis) and :mod:`.advice`
(``affordable_epsilon``, ``recommend``).
"""

from ..ledger.state import LedgerState, inspect_ledger, migrate_json_ledger
from .admission import QUERY_DELTA_SHARE, AdmittedCallFailed, BudgetExceededError
from .advice import RECOMMEND_GATE, RETRIEVE_MAX_NOISE, Recommendation
from .facade import ACCOUNTINGS, PrivateMemory, private_synopsis

__all__ = ["AdmittedCallFailed", "BudgetExceededError", "PrivateMemory", "private_synopsis",
           "ACCOUNTINGS",
           "QUERY_DELTA_SHARE", "RETRIEVE_MAX_NOISE", "RECOMMEND_GATE", "Recommendation",
           "LedgerState", "inspect_ledger", "migrate_json_ledger"]
