"""The privacy ledger: every release from one bank, in an SQLite database, write-ahead.

``docs/ledger.md`` describes the file, its threat model and why no returned release is
ever unrecorded. In brief:

* **Two transactions per release** (``docs/ledger.md`` §4.1). :class:`brace.PrivateMemory`
  opens ``BEGIN IMMEDIATE`` (the database's write lock), reads what other processes
  recorded, prices the call and appends its charge as pending rows, committed
  (``synchronous=NORMAL``) before the bank is read; then computes the release and, in a
  second transaction, inserts it with its footprints and commits — before the release
  is returned. WAL journal, ``synchronous=FULL``: a process killed at any point leaves
  the ledger before the call, with its charge or with its release, never a returned
  release unrecorded nor an admitted call uncharged. A lock held past ``timeout``
  seconds is a :class:`LedgerLockTimeout` that names the file and, where known, the
  process holding it. Before each commit the path
  must still name the file that was opened (same device and inode, and the same journal
  files): a ledger deleted or replaced while open is refused, never written to unseen.
* **Created atomically.** A new ledger is built in a temporary file beside it and
  hard-linked into place, which fails if the name exists: of processes racing to create
  one ledger, exactly one wins and the others fail clearly; nothing removes a file it did
  not create. Migrations are built the same way (:func:`create` with ``fill``).
* **Copied safely.** :func:`backup_ledger` (``brace ledger backup``) copies a live ledger
  with SQLite's online backup API into a new file, verified, published atomically.
* **Bound to its bank and budget.** The bank's SHA-256 fingerprint, the radius, the
  budget and the filter are fixed when the ledger is created (explicitly: ``create=True``
  or ``brace ledger init``); opening it with another bank, radius or budget is an error.
* **Checked.** Every release row is chained to the previous one by a SHA-256 digest
  (keyed HMAC-SHA256 with ``ledger_key`` / ``BRACE_LEDGER_KEY``), and the head of the
  chain is in the metadata; every field is validated on load. Any damage, edit or
  deletion that the chain detects is a :class:`LedgerError`, never a silent reset.
* **Public content only.** Records hold the call's public parameters, its privacy
  event, the released outputs (for free repeats) and the footprints. Never the bank,
  never the seed.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .chain import Chain
from .files import (
    _access_problem,
    _check_path,
    _explain,
    _file_id,
    _holder,
    _is_permission,
    _not_sqlite,
    _staged,
    _unwritable,
    _write_holder,
    connect,
    connect_read_only,
)
from .record import (
    LedgerError,
    LedgerLockTimeout,
    ReleaseRow,
    ledger_key_from_env,
    new_meta,
)

__all__ = ["JOURNAL_MODE", "Ledger"]

#: The journal mode of every ledger (a property of the file, set when it is created).
#: WAL: one fsync per release, and readers never block the writer. Its main file lags
#: the last releases until a checkpoint, so a plain file copy of a live ledger can miss
#: them: copy with :func:`backup_ledger` (``docs/ledger.md``, "Copying a ledger safely";
#: the other modes' cost per call is measured by ``benchmarks/bench_ledger.py --journal``).
JOURNAL_MODE = "WAL"

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE releases (
    id INTEGER PRIMARY KEY,
    time TEXT NOT NULL,
    call_key TEXT NOT NULL,
    record TEXT NOT NULL,
    outputs BLOB NOT NULL,
    counts BLOB,
    centres BLOB NOT NULL,
    radii BLOB NOT NULL,
    mac TEXT NOT NULL
);
CREATE INDEX releases_call_key ON releases (call_key);
"""


class Ledger(Chain):
    """An open SQLite ledger (use :meth:`create` or :meth:`open`).

    Not shared between threads without the caller's lock (:class:`brace.PrivateMemory`
    holds one); each process opens its own. ``read_only`` is None for a ledger open for
    writing, else why it is not (opened to read, or a permission problem): its
    :meth:`transaction` refuses, so nothing can be released through it.
    """

    def __init__(self, path: Path, conn: sqlite3.Connection, meta: dict[str, Any],
                 key: bytes | None, timeout: float, *, read_only: str | None = None) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = conn
        self.meta = meta
        self._key = key
        self.timeout = timeout
        self._head = meta["head"]
        self.read_only = read_only
        #: the current (or last) transaction appended a release: if it failed, a reader
        #: that absorbed it (PrivateMemory._ledger_call) must read the ledger afresh
        self.appended = False
        # what the path named when it was opened: the file and (WAL) its journal files
        self._identity = {suffix: _file_id(Path(os.fspath(path) + suffix))
                          for suffix in ("", "-wal", "-shm")}

    # ------------------------------------------------------------------------------
    @classmethod
    def create(cls, path: str | os.PathLike, *, fingerprint: dict[str, Any],
               budget: tuple[float, float], filter_spec: dict[str, Any],
               key: bytes | str | None = None, timeout: float = 10.0,
               fill: Any = None) -> Ledger:
        """Create a new ledger; refuses an existing file or a missing directory.

        Atomic: the ledger is built in a temporary file beside ``path`` and hard-linked
        into place, which fails if ``path`` exists (another process won a race to create
        it: a clear :class:`LedgerError`, and nothing of the winner's is touched).
        ``fill(ledger)``, if given, records releases in the temporary ledger, in one
        transaction, before it is published (a migration, a restore): no other process
        sees the ledger before it is complete, and if ``fill`` fails nothing is left at
        ``path``."""

        p = Path(os.fspath(path))
        _check_path(p, must_exist=False)
        k = ledger_key_from_env(key)
        meta = new_meta(fingerprint, budget, filter_spec, k)
        with _staged(p) as tmp:
            try:
                conn = connect(tmp, timeout, mode="rwc")
            except sqlite3.Error as exc:
                raise LedgerError(f"cannot create ledger {p}: {_explain(exc, p, True)}") \
                    from None
            try:
                conn.execute(f"PRAGMA journal_mode={JOURNAL_MODE}")
                conn.execute("BEGIN IMMEDIATE")
                for stmt in _SCHEMA.strip().split(";"):
                    if stmt.strip():
                        conn.execute(stmt)
                cls._write_meta(conn, meta, k)
                conn.execute("COMMIT")
                if fill is not None:
                    staged = cls(tmp, conn, meta, k, timeout)
                    with staged.transaction():
                        fill(staged)
            except sqlite3.Error as exc:
                raise LedgerError(f"cannot create ledger {p}: {_explain(exc, p, True)}") \
                    from None
            finally:
                conn.close()
            made = _file_id(tmp)
        db = cls.open(p, key=k, timeout=timeout)
        if db._identity[""] != made:  # replaced between publishing and opening
            db.close()
            raise LedgerError(f"ledger {p} was replaced by another file just after it was "
                              "created; nothing was recorded in it. Check who writes there.")
        return db

    @classmethod
    def open(cls, path: str | os.PathLike, *, key: bytes | str | None = None,
             timeout: float = 10.0, write: bool = True) -> Ledger:
        """Open an existing ledger and verify its metadata (the releases are verified
        as they are read, :meth:`read_since`).

        ``write=False`` opens it read-only (``brace ledger show``, a backup): nothing can
        be recorded through it, and a ledger this process may not write, or whose
        directory it may not write (SQLite's journal files live beside it), still opens.
        With ``write=True`` such a ledger opens read-only too, and :attr:`read_only` says
        why: a release through it is refused with that reason."""
        p = Path(os.fspath(path))
        _check_path(p, must_exist=True)
        k = ledger_key_from_env(key)
        why = _unwritable(p) if write else "it was opened read-only"
        try:
            if why is None:
                conn = connect(p, timeout)
            else:
                conn = connect_read_only(p, timeout, snapshot=not write)
        except sqlite3.DatabaseError as exc:
            problem = _access_problem(p) or (why if write else None)
            if problem or _is_permission(exc):
                raise LedgerError(f"cannot open ledger {p}: {problem or exc}. The file was "
                                  "not changed.") from None
            raise _not_sqlite(p, exc) or LedgerError(
                f"{p} is not a brace ledger database: corrupt, truncated or foreign "
                f"({exc}). It was not changed; restore it from a backup.") from None
        try:
            meta = cls._read_meta(conn, p, k)
        except LedgerError as exc:
            conn.close()
            raise _not_sqlite(p, exc) or exc from None
        except BaseException:
            conn.close()
            raise
        return cls(p, conn, meta, k, timeout, read_only=why)

    def close(self) -> None:
        """Close the connection; a later use of this object is a :class:`LedgerError`."""
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    @property
    def closed(self) -> bool:
        return self._conn is None

    def _live(self) -> sqlite3.Connection:
        if self._conn is None:
            raise LedgerError(
                f"ledger {self.path} is closed (PrivateMemory.close(), or the end of its "
                "with block): nothing was released or spent. Open it again to go on.")
        return self._conn

    def _check_identity(self) -> None:
        """Refuse unless the path still names the file that was opened, with the same
        journal files: a ledger deleted, moved or replaced while open would otherwise
        record releases where no later reader finds them."""
        p = self.path
        for suffix, want in self._identity.items():
            got = _file_id(Path(os.fspath(p) + suffix))
            if suffix and want is None:
                continue  # no such journal file when opened (not WAL, or read-only)
            if got != want:
                what = "the ledger" if not suffix else f"its journal file {p}{suffix}"
                how = "deleted or moved" if got is None else "replaced by another file"
                raise LedgerError(
                    f"ledger {p}: {what} was {how} while this process had it open, so a "
                    "release recorded now would be recorded where no later reader finds "
                    "it. Nothing was released or spent. Restore the ledger (from a backup "
                    "if it was deleted by mistake) and open it again.")

    # ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self, durable: bool = True) -> Iterator[None]:
        """``BEGIN IMMEDIATE`` … ``COMMIT`` (rolled back on any error). Waits at most
        ``timeout`` seconds for the write lock, then raises :class:`LedgerLockTimeout`.
        Refused on a read-only, closed, deleted or replaced ledger (before anything is
        computed), and again just before the commit if the file was deleted or replaced
        meanwhile.

        ``durable=False`` (a call's pending charge, ``docs/ledger.md`` §4.1) commits
        with ``synchronous=NORMAL``: in WAL mode the commit is written to the log (the
        operating system's page cache) but not fsynced, so it survives the death of
        this process but perhaps not a power loss; the next durable commit fsyncs the
        log, and it with it."""
        conn = self._live()
        if self.read_only is not None:
            raise LedgerError(
                f"ledger {self.path} is read-only here: {self.read_only}. A release cannot "
                "be recorded, so none was made and nothing was spent.")
        self._check_identity()
        try:
            if not durable:  # set outside a transaction only; FULL again after it
                conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if not durable:
                self._full(conn)
            if "locked" in str(exc) or "busy" in str(exc):
                raise LedgerLockTimeout(
                    f"could not lock ledger {self.path} within {self.timeout:g} s: "
                    f"{_holder(self.path)}. Nothing was released or spent; retry later "
                    "or raise lock_timeout.") from None
            raise LedgerError(f"ledger {self.path}: {_explain(exc, self.path, True)}. "
                              "Nothing was released or spent.") from None
        _write_holder(self.path)
        self.appended = False
        try:
            meta = self._read_meta(conn, self.path, self._key)
            self.meta = meta
            yield
            self._check_identity()
            conn.execute("COMMIT")
        except BaseException as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            self.meta["head"] = self._head
            if isinstance(exc, sqlite3.Error):
                raise LedgerError(f"could not record in ledger {self.path}: "
                                  f"{_explain(exc, self.path, True)}. Nothing was released "
                                  "or spent.") from exc
            raise
        finally:
            if not durable:
                self._full(conn)
            with contextlib.suppress(OSError):
                Path(os.fspath(self.path) + ".holder").unlink()

    @staticmethod
    def _full(conn: sqlite3.Connection) -> None:
        """Back to ``synchronous=FULL`` (every commit but a pending charge's)."""
        with contextlib.suppress(sqlite3.Error):
            conn.execute("PRAGMA synchronous=FULL")

    @contextlib.contextmanager
    def read_view(self) -> Iterator[None]:
        """One consistent snapshot for reads outside :meth:`transaction` (a deferred read
        transaction): the metadata and releases read inside agree, whatever other
        processes commit meanwhile. Inside a transaction: nothing more."""
        conn = self._live()
        if conn.in_transaction:
            yield
            return
        conn.execute("BEGIN")
        try:
            yield
        finally:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("COMMIT")

    def refresh_meta(self) -> None:
        """Re-read (and verify) the metadata outside a transaction."""
        self.meta = self._read_meta(self._live(), self.path, self._key)

    def read_since(self, after: int, prev_mac: str) -> list[ReleaseRow]:
        """Releases with ``id > after``, each verified against the chain that ends at
        ``prev_mac`` (the MAC of release ``after``), and the chain's end against the head
        in the metadata."""
        conn = self._live()
        try:
            rows = conn.execute(
                "SELECT id, time, call_key, record, outputs, counts, centres, radii, mac "
                "FROM releases WHERE id > ? ORDER BY id", (after,)).fetchall()
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"ledger {self.path} is corrupt or malformed ({exc}). It was "
                              "not changed; restore it from a backup.") from None
        return self._verify_chain(rows, after, prev_mac)
    def _store_row(self, values: tuple, meta: dict[str, Any]) -> None:
        """Write one release row and the metadata that heads it (inside the transaction)."""
        conn = self._live()
        conn.execute(
            "INSERT INTO releases (id, time, call_key, record, outputs, counts, centres, "
            "radii, mac) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", values)
        self._write_meta(conn, meta, self._key)

    def raw_rows(self) -> list[tuple]:
        """Every release row as stored (inside :meth:`read_view`: a backup's source)."""
        try:
            return [tuple(row) for row in self._live().execute(
                "SELECT id, time, call_key, record, outputs, counts, centres, radii, mac "
                "FROM releases ORDER BY id").fetchall()]
        except sqlite3.DatabaseError as exc:  # a damaged file
            raise LedgerError(f"ledger {self.path} cannot be read ({exc}).") from None

    def insert_raw(self, rows: list[tuple], meta: dict[str, Any]) -> None:
        """Insert release rows as stored elsewhere and the metadata that heads them
        (inside the transaction of a new, empty ledger: ``create(fill=…)``)."""
        conn = self._live()
        conn.executemany(
            "INSERT INTO releases (id, time, call_key, record, outputs, counts, centres, "
            "radii, mac) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        self._write_meta(conn, meta, self._key)
        self.meta = meta

    def arrays(self, rid: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The released outputs and noisy counts of release ``rid``, validated (its chain
        was verified when :meth:`read_since` read it)."""
        row = self._live().execute(
            "SELECT id, time, call_key, record, outputs, counts, centres, radii, mac "
            "FROM releases WHERE id = ?", (rid,)).fetchone()
        if row is None:
            raise LedgerError(f"ledger {self.path}: release {rid} is missing.")
        parsed = self._parse_row(row)
        return parsed.outputs, parsed.released_counts
