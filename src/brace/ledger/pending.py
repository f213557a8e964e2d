"""The one reading rule of the two-phase record (``docs/ledger.md`` §4.1): which rows a
reader counts when an admitted call's pending charge was, or was not, completed."""

from __future__ import annotations

from typing import Any

from .record import COMPLETES, PENDING, LedgerError, ReleaseRow

__all__ = ["PendingCharges", "settle"]


class PendingCharges:
    """The one reading rule of the two-phase record, used by every reader
    (:class:`brace.PrivateMemory`, :func:`brace.ledger.inspect_ledger`, copies): a
    pending row (``params["pending"]``) is charged at its reserved footprints until a
    later row names it in ``params["completes"]``; from then on that completion is
    charged instead (at its actual footprints) and the pending row is not counted. A
    pending row no completion names is charged forever (a call that failed or whose
    process died after admission). A completion must name pending rows not yet
    completed: anything else is a :class:`LedgerError`. Rows with neither key (every
    row of a ledger written before the two-phase record) are counted as they are.

    :attr:`open` maps each standing pending row's id to a value of the caller's (its
    footprints and weights)."""

    def __init__(self, unknown: Any = ()) -> None:
        self.open: dict[int, Any] = {}
        #: ids a completion may name without error (rows a lenient reader left out)
        self.unknown = frozenset(unknown)

    def read(self, rid: int, record: dict[str, Any], value: Any, where: str
             ) -> tuple[bool, list[tuple[int, Any]]]:
        """Take row ``rid`` in (rows in id order): ``(pending, completed)`` — whether it
        is a pending charge (kept in :attr:`open` with ``value``) and the
        ``(id, value)`` of the pending rows it completes (removed from :attr:`open`)."""
        params = record["params"]
        if PENDING in params:
            self.open[int(rid)] = value
            return True, []
        done = []
        for pid in params.get(COMPLETES) or ():
            if pid in self.unknown:
                continue
            if pid not in self.open:
                raise LedgerError(
                    f"{where} completes release {pid}, which is not a pending charge "
                    "still open: the ledger was edited or damaged. It was not changed; "
                    "restore it from a backup.")
            done.append((pid, self.open.pop(pid)))
        return False, done


def settle(rows: list[ReleaseRow], unknown: Any = ()) -> tuple[list[ReleaseRow],
                                                             set[int]]:
    """The rows a reader counts, in order — every row but the pending rows that a
    completion replaced — and the ids of the pending rows that stand
    (:class:`PendingCharges`)."""
    rule = PendingCharges(unknown)
    gone: set[int] = set()
    for row in rows:
        _, done = rule.read(row.id, row.record, None, f"release {row.id}")
        gone.update(pid for pid, _ in done)
    return [r for r in rows if r.id not in gone], set(rule.open)
