"""Back up and restore a ledger: a verified copy into a new ledger of either backend
(``brace ledger backup`` / ``restore``, ``docs/ledger.md`` §9, ``docs/deploying.md``).

The chain and MAC of a release row cover its id, time, call key, record and arrays —
not where it is stored — so the rows are copied as stored and the copy verifies with
the same key: a PostgreSQL ledger backs up into an SQLite file (one file, readable by
``brace ledger show``), and an SQLite file restores into a new PostgreSQL ledger (or
the other way round, or file to file). The source is read in one consistent snapshot
while servers keep writing; the copy is verified before it is reported done and
removed if anything fails.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from . import ledger as _ledger
from .ledger_backend import is_server_url, ledger_class
from .ledger_state import LedgerState, inspect_ledger

__all__ = ["copy_ledger"]

_SELECT = ("SELECT id, time, call_key, record, outputs, counts, centres, radii, mac "
           "FROM releases ORDER BY id")


def _raw_rows(db: _ledger.Ledger) -> list[tuple]:
    if hasattr(db, "raw_rows"):
        return db.raw_rows()
    try:
        return [tuple(row) for row in db._conn.execute(_SELECT).fetchall()]
    except Exception as exc:  # sqlite3.DatabaseError: a damaged file
        raise _ledger.LedgerError(f"ledger {db.path} cannot be read ({exc}).") from None


def _verify(db: _ledger.Ledger, rows: list[tuple], meta: dict[str, Any]) -> None:
    """The checks of ``read_since(0, "")``: ids 1…n, each row's MAC chained to the
    previous one and every field valid, the chain's end at the head."""
    mac = ""
    for i, row in enumerate(rows, 1):
        if row[0] != i:
            raise _ledger.LedgerError(f"ledger {db.path}: release {i} is missing (found "
                                      f"{row[0]}); it was not copied.")
        mac = db._verify_row(row, mac)
        db._parse_row(row)
    head = meta["head"]
    if len(rows) != head["count"] or mac != head["mac"]:
        raise _ledger.LedgerError(f"ledger {db.path} fails its integrity check (it holds "
                                  f"{len(rows)} release(s), its head says "
                                  f"{head['count']}); it was not copied.")


def _insert(db: _ledger.Ledger, rows: list[tuple], meta: dict[str, Any]) -> None:
    if hasattr(db, "insert_raw"):
        db.insert_raw(rows, meta)
        return
    db._conn.executemany(
        "INSERT INTO releases (id, time, call_key, record, outputs, counts, centres, radii, "
        "mac) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    db._write_meta(db._conn, meta, db._key)
    db.meta = meta


def _discard(target: Any) -> None:
    """Remove a copy that failed (only what :func:`copy_ledger` created)."""
    if is_server_url(target):
        with contextlib.suppress(Exception):
            import psycopg

            from .ledger_pg import PgLedger

            conn, schema = PgLedger._pg_connect(target, 10.0)
            with conn:
                conn.execute(psycopg.sql.SQL("DROP TABLE IF EXISTS {}, {}").format(
                    psycopg.sql.Identifier(schema, "releases"),
                    psycopg.sql.Identifier(schema, "meta")))
        return
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(OSError):
            Path(os.fspath(target) + suffix).unlink()


def copy_ledger(source: Any, target: Any, *, ledger_key: bytes | str | None = None
                ) -> LedgerState:
    """Copy ledger ``source`` into a new ledger ``target`` (each a path or a
    ``postgresql://`` URL; ``target`` must not exist), verified at both ends.

    The copy holds the same metadata (fingerprint, budget, filter, creation time, the
    chain's head) and the same rows, so it opens with the same bank and key and spends
    the same. A keyed ledger needs its key (``ledger_key`` or ``$BRACE_LEDGER_KEY``).
    Returns the copy's :class:`LedgerState`.
    """
    src = ledger_class(source).open(source, key=ledger_key)
    try:
        with src.read_view():  # one consistent snapshot, servers may keep writing
            src.refresh_meta()
            meta = {k: v for k, v in src.meta.items() if k != "meta_mac"}
            rows = _raw_rows(src)
        _verify(src, rows, meta)
    finally:
        src.close()
    b = meta["budget"]
    dst = ledger_class(target).create(
        target, fingerprint=meta["fingerprint"], budget=(b["epsilon"], b["delta"]),
        filter_spec=meta["filter"], key=ledger_key)
    try:
        try:
            with dst.transaction():
                _insert(dst, rows, meta)
        finally:
            dst.close()
        state = inspect_ledger(target, ledger_key=ledger_key)  # the copy verifies
        if len(state.releases) != len(rows):
            raise _ledger.LedgerError(f"the copy {target} holds {len(state.releases)} "
                                      f"releases, not {len(rows)}.")
    except BaseException:
        _discard(target)
        raise
    return state
