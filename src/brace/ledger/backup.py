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

import os
import sqlite3
from pathlib import Path
from typing import Any

from .backend import ledger_class
from .files import _check_path, _explain, _staged, connect
from .pending import settle
from .record import LedgerError
from .sqlite import Ledger
from .state import LedgerState, inspect_ledger

__all__ = ["backup_ledger", "copy_ledger", "repair_ledger"]


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
    if state.stored != len(rows):  # pragma: no cover - verified rows were written
        raise LedgerError(f"the copy {target} holds {state.stored} rows, "
                                  f"not {len(rows)}: do not use it.")
    return state


def repair_ledger(source: Any, target: Any, *, ledger_key: bytes | str | None = None
                  ) -> tuple[LedgerState, list[str]]:
    """Copy ledger ``source`` into a new ledger ``target``, mending the records it cannot
    read (``brace ledger repair``, ``docs/ledger.md`` §7).

    Earlier versions recorded a release's per-query ε or δ below the smallest value a
    ledger reads (:data:`brace._validation.PRIVACY_FLOOR`, e.g. ``delta=5e-324``); such
    a ledger then opened nowhere. Every row's chain is verified first (a row edited or
    damaged is refused: restore a backup); in a row that verifies but cannot be read,
    an ε or δ below the floor is raised to it and the value recorded is kept beside it
    (``record["repaired"]``). Those two fields only describe the call: its charge is
    its event, which is copied unchanged, so the repaired ledger spends exactly what
    the source did. Anything else unreadable is refused. The rows are chained afresh
    with the same key, the copy is built complete before anyone sees it and verified.
    Returns the copy's :class:`LedgerState` and a line per mended release."""
    import json

    from .._validation import PRIVACY_FLOOR

    src = ledger_class(source).open(source, key=ledger_key, write=False)
    try:
        with src.read_view():
            src.refresh_meta()
            meta = {k: v for k, v in src.meta.items() if k != "meta_mac"}
            rows = src.raw_rows()
        bad: list[tuple[int, str]] = []
        src._verify_chain(rows, 0, "", bad)  # every MAC, ids 1…n and the head
        where = str(src.path)
    finally:
        src.close()
    if not bad:
        raise LedgerError(f"ledger {where} reads whole: nothing to repair (copy it "
                                  "with 'brace ledger backup').")
    fixed: dict[int, str] = {}
    for rid, why in bad:
        row = list(rows[rid - 1])
        try:
            rec = json.loads(row[3])
        except ValueError:
            rec = None
        rec = rec if isinstance(rec, dict) else {}  # no object: nothing repair mends
        old = {}
        for k in ("epsilon", "delta"):
            v = rec.get(k)
            if isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < PRIVACY_FLOOR:
                old[k] = float(v).hex()
                rec[k] = PRIVACY_FLOOR
        if not old:
            raise LedgerError(
                f"ledger {where}: release {rid} cannot be read ({why}) and is not a record "
                "that repair mends (an epsilon or delta below "
                f"{PRIVACY_FLOOR:g}). Restore the ledger from a backup.")
        rec["repaired"] = old
        row[3] = json.dumps(rec, sort_keys=True, allow_nan=False)
        rows[rid - 1] = tuple(row)
        fixed[rid] = (f"release {rid}: " + ", ".join(
            f"{k} {float.fromhex(v)!r} recorded as {PRIVACY_FLOOR:g}" for k, v in old.items()))

    def fill(dst: Ledger) -> None:  # rows re-chained with the same key
        out, mac = [], ""
        for row in rows:
            rid, time, call_key, rec, ob, cb, ctb, rb, _ = row
            mac = dst._row_mac(mac, rid, time, call_key, rec, bytes(ob),
                               None if cb is None else bytes(cb), bytes(ctb), bytes(rb))
            new = (rid, time, call_key, rec, ob, cb, ctb, rb, mac)
            dst._parse_row(new)  # every row now reads
            out.append(new)
        dst.insert_raw(out, {**meta, "head": {"count": len(out), "mac": mac}})

    b = meta["budget"]
    ledger_class(target).create(
        target, fingerprint=meta["fingerprint"], budget=(b["epsilon"], b["delta"]),
        filter_spec=meta["filter"], key=ledger_key, fill=fill).close()
    state = inspect_ledger(target, ledger_key=ledger_key)
    return state, [fixed[i] for i in sorted(fixed)]


def backup_ledger(source: str | os.PathLike, target: str | os.PathLike, *,
                  key: bytes | str | None = None, timeout: float = 10.0) -> int:
    """Copy the ledger ``source`` to the new file ``target``, safely while it is in use:
    ``source`` is opened read-only, copied in one consistent snapshot (SQLite's online
    backup API), the copy is verified and then published atomically (never a partial
    ``target``; an existing one is refused). Returns the number of releases copied (as a
    reader counts them: a completed call's pending charge is not one, ``docs/ledger.md``
    §4.1; every stored row is copied).

    A copy restored later rolls the recorded spend back to the copy's: keep backups as
    carefully as the ledger (``docs/ledger.md``, threat model)."""
    src = Ledger.open(source, key=key, timeout=timeout, write=False)
    p = Path(os.fspath(target))
    try:
        conn = src._live()
        _check_path(p, must_exist=False)
        with _staged(p) as tmp:
            try:
                dst = connect(tmp, timeout, mode="rwc")
                try:
                    conn.backup(dst)  # one consistent snapshot, also while others write
                finally:
                    dst.close()
            except sqlite3.Error as exc:
                raise LedgerError(f"cannot back up ledger {src.path} to {p}: "
                                  f"{_explain(exc, p, True)}") from None
            copy = Ledger.open(tmp, key=src._key, timeout=timeout, write=False)
            try:  # verified (metadata, every release's chain) before it is published
                return len(settle(copy.read_since(0, ""))[0])  # the releases it counts
            finally:
                copy.close()
    finally:
        src.close()
