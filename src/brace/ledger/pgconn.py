"""Connecting to a PostgreSQL ledger's database (``docs/ledger.md`` §9): the server
reached or :class:`~brace.ledger.url.LedgerUnavailable`, durable commits required, the
schema named by the URL's ``search_path``."""

from __future__ import annotations

import math
import os
import socket

import psycopg

from .record import LedgerError
from .url import LedgerUnavailable, redact_url

__all__ = ["connect"]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def connect(url: str, timeout: float) -> tuple[psycopg.Connection, str]:
    """A connection to the ledger's database (autocommit; ``synchronous_commit = on``)
    and its current schema; :class:`LedgerUnavailable` if the server cannot be reached,
    :class:`LedgerError` for a server with ``fsync`` off or a missing schema."""
    where = redact_url(url)
    try:
        conn = psycopg.connect(
            url, autocommit=True,
            connect_timeout=max(2, min(10, math.ceil(timeout or 10))),
            application_name=f"brace pid {os.getpid()} on {socket.gethostname()}"[:63])
    except psycopg.OperationalError as exc:
        raise LedgerUnavailable(
            f"cannot reach the ledger's database {where}: {_first_line(exc)}. Nothing "
            "was released or spent; retry when it is up.") from None
    except psycopg.Error as exc:
        raise LedgerError(f"ledger URL {where}: {_first_line(exc)}") from None
    try:
        conn.execute("SET synchronous_commit TO on")
        fsync = conn.execute("SHOW fsync").fetchone()[0]
        schema = conn.execute("SELECT current_schema()").fetchone()[0]
    except psycopg.OperationalError as exc:
        conn.close()
        raise LedgerUnavailable(f"ledger {where}: {_first_line(exc)}") from None
    except psycopg.Error as exc:
        conn.close()
        raise LedgerError(f"ledger {where}: {_first_line(exc)}") from None
    if fsync != "on":
        conn.close()
        raise LedgerError(
            f"ledger {where}: the PostgreSQL server runs with fsync = {fsync}: a crash "
            "could lose a committed release that was already returned. A ledger "
            "needs fsync = on.")
    if schema is None:
        conn.close()
        raise LedgerError(
            f"ledger {where}: no schema of the search_path exists (a schema named in "
            "options=-csearch_path=... must be created first: CREATE SCHEMA name).")
    return conn, schema
