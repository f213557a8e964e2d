"""The privacy ledger (``docs/ledger.md``): every release from one bank, recorded before
it is returned, in an SQLite file or a PostgreSQL database.

One idea per module:

* :mod:`~brace.ledger.record` — the record and its validation, one check used on write
  and on read (:func:`parse_row`, :func:`check_meta`), events as JSON, the errors;
* :mod:`~brace.ledger.chain` — the chain of row MACs and the head, for every backend;
* :mod:`~brace.ledger.sqlite` — the SQLite ledger (:class:`Ledger`);
* :mod:`~brace.ledger.files` — its file: paths, permissions, atomic publication;
* :mod:`~brace.ledger.pg` — the PostgreSQL ledger (:class:`PgLedger`, needs psycopg);
* :mod:`~brace.ledger.state` — a ledger read without its bank (:class:`LedgerState`),
  JSON-ledger migration, the cached filter weights of an event;
* :mod:`~brace.ledger.url` — ledger URLs and the unreachable-server error;
* :mod:`~brace.ledger.backend` — which backend a path or URL names;
* :mod:`~brace.ledger.backup` — verified copies (SQLite's online backup, or between
  backends) and repair.

Every name is importable from ``brace.ledger``; :class:`PgLedger` is loaded on first use
(psycopg is an optional dependency).
"""

from __future__ import annotations

from typing import Any

from .backend import ledger_class
from .backup import backup_ledger, copy_ledger, repair_ledger
from .pending import PendingCharges, settle
from .record import (
    CELLS_METHOD,
    COMPLETES,
    KEY_ENV,
    LEDGER_FORMAT,
    PENDING,
    PENDING_NOTE,
    LedgerError,
    LedgerLockTimeout,
    ReleaseRow,
    bank_fingerprint,
    check_meta,
    event_from_dict,
    event_to_dict,
    ledger_key_from_env,
    new_meta,
    now,
    parse_row,
)
from .sqlite import JOURNAL_MODE, Ledger
from .state import (
    MAX_MIGRATED_COORDINATES,
    LedgerState,
    check_budget,
    inspect_ledger,
    migrate_json_ledger,
    plural,
    read_json_ledger,
    weights,
)
from .url import URL_SCHEMES, LedgerUnavailable, check_location, is_server_url, redact_url

__all__ = [
    "CELLS_METHOD", "COMPLETES", "JOURNAL_MODE", "KEY_ENV", "LEDGER_FORMAT",
    "MAX_MIGRATED_COORDINATES", "PENDING", "PENDING_NOTE", "URL_SCHEMES", "Ledger",
    "LedgerError", "LedgerLockTimeout", "LedgerState", "LedgerUnavailable", "PendingCharges",
    "PgLedger", "ReleaseRow", "backup_ledger", "bank_fingerprint",
    "check_budget", "check_location", "check_meta", "copy_ledger", "event_from_dict",
    "event_to_dict", "inspect_ledger", "is_server_url", "ledger_class",
    "ledger_key_from_env", "migrate_json_ledger", "new_meta", "now", "parse_row", "plural",
    "read_json_ledger", "redact_url", "repair_ledger", "settle", "weights",
]


def __getattr__(name: str) -> Any:
    if name == "PgLedger":  # psycopg is optional: imported only when asked for
        from .pg import PgLedger

        return PgLedger
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
