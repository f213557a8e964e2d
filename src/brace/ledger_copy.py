"""Back up and restore a ledger: a verified copy into a new ledger of either backend
(``brace ledger backup`` / ``restore``, ``docs/ledger.md`` §9, ``docs/deploying.md``).

The chain and MAC of a release row cover its id, time, call key, record and arrays —
not where it is stored — so the rows are copied as stored and the copy verifies with
the same key: a PostgreSQL ledger backs up into an SQLite file (one file, readable by
``brace ledger show``), and an SQLite file restores into a new PostgreSQL ledger (or
the other way round, or file to file). The source is read in one consistent snapshot
while servers keep writing; the copy is made complete before anyone can see it
(``create(fill=…)``) and verified before it is reported done.
"""

from __future__ import annotations

from typing import Any

from . import ledger as _ledger
from .ledger_backend import ledger_class
from .ledger_state import LedgerState, inspect_ledger

__all__ = ["copy_ledger"]


def copy_ledger(source: Any, target: Any, *, ledger_key: bytes | str | None = None
                ) -> LedgerState:
    """Copy ledger ``source`` into a new ledger ``target`` (each a path or a
    ``postgresql://`` URL; ``target`` must not exist), verified at both ends.

    The copy holds the same metadata (fingerprint, budget, filter, creation time, the
    chain's head) and the same rows, so it opens with the same bank and key and spends
    the same. A keyed ledger needs its key (``ledger_key`` or ``$BRACE_LEDGER_KEY``).
    Returns the copy's :class:`LedgerState`.
    """
    src = ledger_class(source).open(source, key=ledger_key, write=False)
    try:
        with src.read_view():  # one consistent snapshot, servers may keep writing
            src.refresh_meta()
            meta = {k: v for k, v in src.meta.items() if k != "meta_mac"}
            rows = src.raw_rows()
        src._verify_chain(rows, 0, "")  # ids 1…n, the MAC chain, the head
    finally:
        src.close()
    b = meta["budget"]
    # complete before anyone sees it (``create(fill=…)``): a server pointed at the
    # target cannot record a release in a half-made copy, and a failure leaves nothing
    ledger_class(target).create(
        target, fingerprint=meta["fingerprint"], budget=(b["epsilon"], b["delta"]),
        filter_spec=meta["filter"], key=ledger_key,
        fill=lambda dst: dst.insert_raw(rows, meta)).close()
    state = inspect_ledger(target, ledger_key=ledger_key)  # the copy verifies
    if len(state.releases) != len(rows):  # pragma: no cover - verified rows were written
        raise _ledger.LedgerError(f"the copy {target} holds {len(state.releases)} releases, "
                                  f"not {len(rows)}: do not use it.")
    return state
