"""The privacy ledger in PostgreSQL: one budget for server processes on several hosts
(``docs/ledger.md`` §9, which gives the reasons for each choice below).

The same schema (tables ``meta`` and ``releases``), records, validation, chain and MAC
as the SQLite ledger (:mod:`brace.ledger.record`, :mod:`brace.ledger.chain`); only the
storage and the lock differ. ``ledger="postgresql://user@host:port/db"`` (psycopg 3;
``?options=-csearch_path%3Dname`` puts the tables in schema ``name``: one ledger per
schema).

* **Writers serialised** by the metadata's row locks: each transaction of a release
  (``docs/ledger.md`` §4.1: the pending charge, then the release) runs ``READ
  COMMITTED`` and first locks every meta row, the chain's head among them (``SELECT …
  FROM meta ORDER BY key FOR UPDATE``, at most ``timeout`` seconds: ``lock_timeout``),
  then reads, prices and appends the pending charge — or appends the release — rewrites
  the head and commits; the release is returned after the second commit (not
  ``SERIALIZABLE`` with retries, not an advisory lock). PostgreSQL frees the lock at
  commit, rollback or a dead connection.
* **Durable**: ``synchronous_commit = on``, but ``off`` for a pending charge's commit
  (in the server's WAL buffers, proof against the client's death); a server with
  ``fsync = off`` is refused.
* **Unavailable server**: a failed connection is :class:`LedgerUnavailable` (a
  :class:`~brace.ledger.LedgerError`), nothing is released, the next call reconnects;
  a commit whose acknowledgement is lost may have recorded a release nobody received
  (safe: spent, not served).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from .pgconn import _first_line, connect
from .record import (
    LedgerError,
    LedgerLockTimeout,
    ReleaseRow,
    _canon,
    _digest,
    ledger_key_from_env,
    new_meta,
)
from .sqlite import Ledger
from .url import LedgerUnavailable, redact_url

__all__ = ["PgLedger", "LedgerUnavailable"]

_COLUMNS = "id, time, call_key, record, outputs, counts, centres, radii, mac"


class _Rows:
    """Rows already fetched, offered to :meth:`Ledger._read_meta` (which validates
    them exactly as for an SQLite ledger)."""

    def __init__(self, rows: list[tuple[str, str]]) -> None:
        self._rows = rows

    def execute(self, *_: Any) -> _Rows:
        return self

    def fetchall(self) -> list[tuple[str, str]]:
        return self._rows


class PgLedger(Ledger):
    """An open PostgreSQL ledger (use :meth:`create` or :meth:`open`); the interface
    of :class:`brace.ledger.Ledger`. ``path`` is the URL without its password."""

    backend = "postgresql"

    def __init__(self, url: str, conn: psycopg.Connection, schema: str,
                 meta: dict[str, Any], key: bytes | None, timeout: float) -> None:
        super().__init__(redact_url(url), conn, meta, key, timeout)  # type: ignore[arg-type]
        self._url = url
        self.schema = schema
        self._in_tx = False  # inside transaction() or read_view()
        #: release rows appended in this write transaction (None outside one): written
        #: with the new head and COMMIT in one round trip when it ends
        self._pending: list[tuple] | None = None
        self._closed = False
        m, r = sql.Identifier(schema, "meta"), sql.Identifier(schema, "releases")
        self._sql = {
            # every meta row, locked in key order (the head among them): one round trip
            "lock": sql.SQL("SELECT key, value FROM {} ORDER BY key FOR UPDATE").format(m),
            "meta": sql.SQL("SELECT key, value FROM {}").format(m),
            "upsert": sql.SQL("INSERT INTO {} (key, value) VALUES (%s, %s) ON CONFLICT "
                              "(key) DO UPDATE SET value = EXCLUDED.value").format(m),
            "since": sql.SQL(f"SELECT {_COLUMNS} FROM {{}} WHERE id > %s ORDER BY id"
                             ).format(r),
            "one": sql.SQL(f"SELECT {_COLUMNS} FROM {{}} WHERE id = %s").format(r),
            "all": sql.SQL(f"SELECT {_COLUMNS} FROM {{}} ORDER BY id").format(r),
            "insert": sql.SQL(f"INSERT INTO {{}} ({_COLUMNS}) VALUES "
                              "(%s, %s, %s, %s, %s, %s, %s, %s, %s)").format(r),
        }

    # ------------------------------------------------------------------------------
    _pg_connect = staticmethod(connect)  # (serve's synopsis store uses it too)

    def _tables(self) -> int:
        return self._conn.execute(
            "SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = %s AND "
            "tablename IN ('meta', 'releases')", (self.schema,)).fetchone()[0]

    @classmethod
    def create(cls, path: str, *, fingerprint: dict[str, Any],  # type: ignore[override]
               budget: tuple[float, float], filter_spec: dict[str, Any],
               key: bytes | str | None = None, timeout: float = 10.0,
               fill: Any = None) -> PgLedger:
        """Create a new, empty ledger in the URL's schema; refuses one that holds a
        ledger (or a table named ``meta`` or ``releases``). ``fill(ledger)``, if given,
        records releases in the same transaction as the tables (a migration, a restore):
        no other session sees the ledger before it is complete, and if ``fill`` fails
        nothing is left."""
        k = ledger_key_from_env(key)
        conn, schema = cls._pg_connect(path, timeout)
        meta = new_meta(fingerprint, budget, filter_spec, k)
        db = cls(path, conn, schema, meta, k, timeout)
        try:
            with db._guard(), db._exists_as_error():
                with conn.transaction():
                    if db._tables():
                        raise LedgerError(
                            f"ledger {db.path} already exists (schema {schema!r} holds "
                            "a table meta or releases); open it (create=False) or choose "
                            "another database or schema.")
                    db._create_tables()
                    db._store_meta(meta)
                    if fill is not None:
                        db._in_tx, db._pending = True, []
                        try:
                            fill(db)
                            db._flush()
                        finally:
                            db._in_tx, db._pending = False, None
        except BaseException:
            db.close()
            raise
        return db

    @contextlib.contextmanager
    def _exists_as_error(self) -> Iterator[None]:
        """A concurrent creation of the same tables is the 'already exists' error."""
        try:
            yield
        except (pg_errors.DuplicateTable, pg_errors.UniqueViolation):
            raise LedgerError(f"ledger {self.path} already exists (created concurrently); "
                              "open it (create=False).") from None

    def _create_tables(self) -> None:
        s = sql.Identifier(self.schema)
        self._conn.execute(sql.SQL(
            "CREATE TABLE {}.meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)").format(s))
        self._conn.execute(sql.SQL(
            "CREATE TABLE {}.releases (id BIGINT PRIMARY KEY, time TEXT NOT NULL, "
            "call_key TEXT NOT NULL, record TEXT NOT NULL, outputs BYTEA NOT NULL, "
            "counts BYTEA, centres BYTEA NOT NULL, radii BYTEA NOT NULL, "
            "mac TEXT NOT NULL)").format(s))
        self._conn.execute(sql.SQL(
            "CREATE INDEX releases_call_key ON {}.releases (call_key)").format(s))

    @classmethod
    def open(cls, path: str, *, key: bytes | str | None = None,  # type: ignore[override]
             timeout: float = 10.0, write: bool = True) -> PgLedger:
        """Open an existing ledger and verify its metadata (``write`` is accepted for the
        SQLite ledger's signature: reads never write a server ledger)."""
        k = ledger_key_from_env(key)
        conn, schema = cls._pg_connect(path, timeout)
        db = cls(path, conn, schema, {"head": {"count": 0, "mac": ""}}, k, timeout)
        try:
            with db._guard():
                if db._tables() != 2:
                    raise LedgerError(
                        f"ledger {db.path} does not exist (schema {schema!r} holds no "
                        f"brace ledger). Create it explicitly (PrivateMemory(..., "
                        f"create=True) or 'brace ledger init URL'); a mistyped URL never "
                        "starts a fresh budget.")
                db.meta = db._load_meta()
        except BaseException:
            db.close()
            raise
        db._head = db.meta["head"]
        return db

    def close(self) -> None:
        """Close the connection; a later use of this object is a :class:`LedgerError`."""
        self._closed = True
        with contextlib.suppress(psycopg.Error):
            self._conn.close()

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------------------------------
    def _error(self, exc: BaseException) -> LedgerError:
        """A database error as the ledger's error type."""
        if isinstance(exc, pg_errors.LockNotAvailable):
            return LedgerLockTimeout(
                f"could not lock ledger {self.path} within {self.timeout:g} s: "
                f"{self._holders()}. Nothing was released or spent; retry later or raise "
                "lock_timeout.")
        if isinstance(exc, psycopg.OperationalError) or self._conn.broken:
            return LedgerUnavailable(
                f"lost the connection to the ledger's database {self.path}: "
                f"{_first_line(exc)}. Nothing was returned; retry when it is up.")
        return LedgerError(f"ledger {self.path}: {_first_line(exc)}")

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Database errors inside become ledger errors."""
        try:
            yield
        except LedgerError:
            raise
        except psycopg.Error as exc:
            raise self._error(exc) from None

    def _holders(self) -> str:
        """Who may hold the ledger's lock: the other brace sessions in a transaction."""
        with contextlib.suppress(psycopg.Error):
            self._rollback()
            rows = self._conn.execute(
                "SELECT application_name, xact_start FROM pg_catalog.pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() AND "
                "xact_start IS NOT NULL AND application_name LIKE 'brace%%' "
                "ORDER BY xact_start").fetchall()
            if rows:
                return "held by one of: " + "; ".join(
                    f"{name} (in a transaction since {start:%Y-%m-%d %H:%M:%S})"
                    for name, start in rows)
        return "another session holds its write lock"

    def _live(self) -> psycopg.Connection:
        """The connection, reopened if the last one was lost (not after :meth:`close`)."""
        if self._closed:
            raise LedgerError(
                f"ledger {self.path} is closed (PrivateMemory.close(), or the end of its "
                "with block): nothing was released or spent. Open it again to go on.")
        if self._conn.closed or self._conn.broken:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
            conn, schema = self._pg_connect(self._url, self.timeout)
            if schema != self.schema:
                conn.close()
                raise LedgerError(f"ledger {self.path}: the URL now names schema "
                                  f"{schema!r}, not {self.schema!r}.")
            self._conn = conn
        return self._conn

    def _rollback(self) -> None:
        if not (self._conn.closed or self._conn.broken):
            with contextlib.suppress(psycopg.Error):
                self._conn.execute("ROLLBACK")

    def _load_meta(self) -> dict[str, Any]:
        rows = self._conn.execute(self._sql["meta"]).fetchall()
        return Ledger._read_meta(_Rows(rows), self.path, self._key)  # the same checks

    def _store_meta(self, meta: dict[str, Any]) -> None:
        body = {k: v for k, v in meta.items() if k != "meta_mac"}
        mac = _digest(self._key, b"meta", _canon(body))
        with self._conn.cursor() as cur:
            cur.executemany(self._sql["upsert"],
                            [(k, json.dumps(v, allow_nan=False))
                             for k, v in {**body, "meta_mac": mac}.items()])

    # ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self, durable: bool = True) -> Iterator[None]:
        """``BEGIN`` and the head's row lock … ``COMMIT`` (rolled back on any error).
        Waits at most ``timeout`` seconds for the lock (0: no limit), then raises
        :class:`LedgerLockTimeout`. ``durable=False`` (a call's pending charge,
        ``docs/ledger.md`` §4.1): ``SET LOCAL synchronous_commit = off`` — the commit is
        acknowledged once it is in the server's WAL buffers, before they are flushed:
        it survives the death of this client process (the server holds it), not
        perhaps a crash of the server's host."""
        with self._guard():
            conn = self._live()
            try:
                ms = max(0, round(self.timeout * 1000))
                with conn.pipeline():  # one round trip
                    conn.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
                    conn.execute(f"SET LOCAL lock_timeout = '{ms}ms'")
                    if not durable:
                        conn.execute("SET LOCAL synchronous_commit = off")
                    cur = conn.execute(self._sql["lock"])
                rows = cur.fetchall()
                if not any(k == "head" for k, _ in rows):
                    raise LedgerError(f"ledger {self.path} has no chain head: it was "
                                      "edited or damaged. Restore it from a backup.")
                self.meta = Ledger._read_meta(_Rows(rows), self.path, self._key)
            except BaseException:
                self._rollback()
                raise
        self._in_tx, self._pending, self.appended = True, [], False
        try:
            yield
            with self._guard(), conn.pipeline():  # the writes and COMMIT: one round trip
                self._flush()
                conn.execute("COMMIT")
        except BaseException as exc:
            self._rollback()
            self.meta["head"] = self._head
            if isinstance(exc, psycopg.Error):
                raise self._error(exc) from None
            raise
        finally:
            self._in_tx, self._pending = False, None

    @contextlib.contextmanager
    def read_view(self) -> Iterator[None]:
        """One consistent snapshot (``REPEATABLE READ``, read only) for reads outside
        :meth:`transaction`: the metadata and releases read inside agree, whatever
        other sessions commit meanwhile. Inside a transaction: nothing more."""
        if self._in_tx:
            yield
            return
        with self._guard():
            conn = self._live()
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        self._in_tx = True
        try:
            yield
        finally:
            self._in_tx = False
            self._rollback()

    def refresh_meta(self) -> None:
        """Re-read (and verify) the metadata outside a transaction."""
        with self._guard():
            self._live()
            self.meta = self._load_meta()

    def read_since(self, after: int, prev_mac: str) -> list[ReleaseRow]:
        """As :meth:`brace.ledger.Ledger.read_since`: releases with ``id > after``,
        verified along the chain from ``prev_mac`` to the head in the metadata."""
        with self._guard():
            rows = self._conn.execute(self._sql["since"], (int(after),)).fetchall()
        return self._verify_chain(rows, after, prev_mac)

    def _store_row(self, values: tuple, meta: dict[str, Any]) -> None:
        """Keep one release row (:meth:`Ledger.append` built it and its MAC): written
        with the new head and COMMIT in one round trip when the transaction ends
        (:meth:`_flush`); a failure there rolls everything back."""
        self._writing().append(values)

    def _writing(self) -> list[tuple]:
        if self._pending is None:
            raise LedgerError(f"ledger {self.path}: a release is written only inside "
                              "transaction().")
        return self._pending

    def _flush(self) -> None:
        """Write the kept rows and the metadata that heads them (in the transaction)."""
        if self._pending:
            with self._conn.cursor() as cur:
                cur.executemany(self._sql["insert"], self._pending)
            self._store_meta(self.meta)

    def arrays(self, rid: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The released outputs and noisy counts of release ``rid``, validated."""
        with self._guard():
            row = self._conn.execute(self._sql["one"], (int(rid),)).fetchone()
        if row is None:
            raise LedgerError(f"ledger {self.path}: release {rid} is missing.")
        parsed = self._parse_row(row)
        return parsed.outputs, parsed.released_counts

    # ------------------------------------------------------------------------------
    # raw rows, for copies (brace.ledger.backup)
    def raw_rows(self) -> list[tuple]:
        """Every release row as stored (inside :meth:`read_view`)."""
        with self._guard():
            return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
                    for row in self._conn.execute(self._sql["all"]).fetchall()]

    def insert_raw(self, rows: list[tuple], meta: dict[str, Any]) -> None:
        """Insert release rows as stored elsewhere and the metadata that heads them
        (inside the transaction of a new, empty ledger: ``create(fill=…)``)."""
        self._writing().extend(rows)
        with self._guard():
            self._store_meta(meta)
        self.meta = meta


