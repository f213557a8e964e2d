"""The privacy ledger: every release from one bank, in an SQLite database, write-ahead.

``docs/ledger.md`` describes the file, its threat model and why no returned release is
ever unrecorded. In brief:

* **One transaction per release.** :class:`brace.PrivateMemory` opens ``BEGIN
  IMMEDIATE`` (the database's write lock), reads what other processes recorded, prices
  the call, computes the release, inserts it with its footprints and commits — all before
  the release is returned. WAL journal, ``synchronous=FULL``: a process killed at any
  point leaves the ledger before or after the release, never a returned release
  unrecorded. A lock held past ``timeout`` seconds is a :class:`LedgerLockTimeout` that
  names the file and, where known, the process holding it. Before each commit the path
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
import datetime as _dt
import errno
import hashlib
import hmac
import json
import math
import os
import secrets
import sqlite3
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import accounting as acc
from .._validation import check_budget, check_privacy_delta, check_privacy_epsilon

__all__ = [
    "LEDGER_FORMAT",
    "LedgerError",
    "LedgerLockTimeout",
    "Ledger",
    "ReleaseRow",
    "backup_ledger",
    "bank_fingerprint",
    "event_to_dict",
    "event_from_dict",
    "read_json_ledger",
    "ledger_key_from_env",
]

LEDGER_FORMAT = "brace-ledger/2"
JSON_LEDGER_FORMAT = "brace-ledger/1"
KEY_ENV = "BRACE_LEDGER_KEY"
_SQLITE_MAGIC = b"SQLite format 3\x00"
#: The journal mode of every ledger (a property of the file, set when it is created).
#: WAL: one fsync per release, and readers never block the writer. Its main file lags
#: the last releases until a checkpoint, so a plain file copy of a live ledger can miss
#: them: copy with :func:`backup_ledger` (``docs/ledger.md``, "Copying a ledger safely";
#: the other modes' cost per call is measured by ``benchmarks/bench_ledger.py --journal``).
JOURNAL_MODE = "WAL"


class LedgerError(ValueError):
    """A ledger that cannot be trusted or used: missing, corrupt, edited, foreign or
    mismatched. Every problem with a ledger's content raises this type."""


class LedgerLockTimeout(LedgerError, TimeoutError):
    """Another thread or process held the ledger's write lock past the time-out."""


def ledger_key_from_env(key: bytes | str | None) -> bytes | None:
    """The MAC key: ``key`` if given, else ``$BRACE_LEDGER_KEY``, else None (unkeyed)."""
    if key is None:
        key = os.environ.get(KEY_ENV) or None
    if key is None:
        return None
    if isinstance(key, str):
        key = key.encode("utf-8")
    if not isinstance(key, bytes) or len(key) < 16:
        raise ValueError("ledger_key must be at least 16 bytes (or a string of 16+ chars).")
    return key


def bank_fingerprint(bank: Any, radius: float) -> dict[str, Any]:
    """SHA-256 of the bank's bytes (in its own dtype, float32 or float64, C order), its
    shape, dtype and radius (:func:`brace._fingerprint.bank_fingerprint`; the radius
    enters as its exact ``float.hex``, so radii one ulp apart differ). Memory maps are
    streamed in blocks, never copied whole; so are torch tensors (copied to the host one
    block at a time)."""
    from .._fingerprint import bank_fingerprint as _digest
    from .._fingerprint import numpy_dtype

    if not hasattr(bank, "shape") or not hasattr(bank, "dtype"):
        bank = np.asarray(bank)
    return {
        "sha256": _digest(bank, radius),
        "shape": [int(s) for s in bank.shape],
        "dtype": str(numpy_dtype(bank.dtype)),
        "radius": float(radius),
    }


# --------------------------------------------------------------------------------------
# Events <-> JSON
# --------------------------------------------------------------------------------------


def event_to_dict(event: acc.DpEvent) -> dict[str, Any]:
    """A JSON-able description of an accounting event (inverse: :func:`event_from_dict`)."""
    if isinstance(event, acc.GaussianStep):
        return {"type": "GaussianStep", "rho": float(event.rho)}
    if isinstance(event, acc.SmoothGaussianStep):
        return {"type": "SmoothGaussianStep", "rho": float(event.rho),
                "gamma": float(event.gamma), "dim": int(event.dim)}
    if isinstance(event, acc.CountedGaussianStep):
        return {"type": "CountedGaussianStep", "rho": float(event.rho),
                "eps_count": float(event.eps_count), "delta_count": float(event.delta_count)}
    if isinstance(event, acc.SelfComposed):
        return {"type": "SelfComposed", "count": int(event.count),
                "event": event_to_dict(event.event)}
    if isinstance(event, acc.Composed):
        return {"type": "Composed", "events": [event_to_dict(e) for e in event.events]}
    if isinstance(event, acc.NonPrivateEvent):
        return {"type": "NonPrivateEvent", "reason": event.reason}
    raise TypeError(f"cannot record event {event!r} (type {type(event).__name__}).")


def _num(v: Any, what: str = "number", *, lo: float = 0.0, hi: float = math.inf) -> float:
    """A finite JSON number in ``[lo, hi)``; :class:`LedgerError` otherwise."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) \
            or not lo <= v < hi:
        raise LedgerError(f"ledger {what} must be a finite number in [{lo:g}, {hi:g}); "
                          f"got {v!r}.")
    return float(v)


def _checked(check: Any, v: Any, what: str, **kw: Any) -> float:
    """``check(v, what)`` of :mod:`brace._validation` — the same check that admits the
    value on the way in — as a :class:`LedgerError` (a JSON number only)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise LedgerError(f"ledger {what} must be a number; got {v!r}.")
    try:
        return check(v, what, **kw)
    except (TypeError, ValueError) as exc:
        raise LedgerError(str(exc)) from None


def _int(v: Any, what: str, lo: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise LedgerError(f"ledger {what} must be an integer >= {lo}; got {v!r}.")
    return int(v)


def event_from_dict(data: Any) -> acc.DpEvent:
    """The event described by :func:`event_to_dict`'s output; :class:`LedgerError` for
    anything else (unknown type, missing or non-finite or negative fields)."""
    if not isinstance(data, dict) or "type" not in data:
        raise LedgerError(f"ledger event must be an object with a 'type'; got {data!r}.")
    kind = data["type"]
    try:
        if kind == "GaussianStep":
            return acc.GaussianStep(_num(data["rho"], "rho"))
        if kind == "SmoothGaussianStep":
            return acc.SmoothGaussianStep(_num(data["rho"], "rho"),
                                          _num(data["gamma"], "gamma"),
                                          _int(data["dim"], "dim", 1))
        if kind == "CountedGaussianStep":
            return acc.CountedGaussianStep(_num(data["rho"], "rho"),
                                           _num(data["eps_count"], "eps_count"),
                                           _num(data["delta_count"], "delta_count", hi=1.0))
        if kind == "SelfComposed":
            return acc.SelfComposed(event_from_dict(data["event"]),
                                    _int(data["count"], "count", 1))
        if kind == "Composed":
            if not isinstance(data["events"], list):
                raise LedgerError("ledger 'Composed.events' must be a list.")
            return acc.Composed(tuple(event_from_dict(e) for e in data["events"]))
        if kind == "NonPrivateEvent":
            return acc.NonPrivateEvent(str(data.get("reason", "")))
    except KeyError as exc:
        raise LedgerError(f"malformed ledger event {data!r}: missing {exc}.") from None
    raise LedgerError(f"unknown ledger event type {kind!r}.")


# --------------------------------------------------------------------------------------
# Rows
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReleaseRow:
    """One recorded release: its id, the record (public parameters and event), the
    released arrays (for repeats) and its footprints (centres, radii)."""

    id: int
    time: str
    call_key: str
    record: dict[str, Any]
    outputs: np.ndarray
    released_counts: np.ndarray | None
    centres: np.ndarray
    radii: np.ndarray


#: the method of a record of a synopsis's cell release (``docs/privacy-accounting.md`` §14)
CELLS_METHOD = "synopsis-cells"

_RECORD_FIELDS = {
    "method": str, "queries": int, "steps": int, "dim": int, "epsilon": float,
    "delta": float, "event": dict, "params": dict, "release": str,
}


def _check_record(rec: Any, where: str) -> dict[str, Any]:
    """A release's record, valid as written and as read: the one check of both
    (:meth:`Ledger.append` parses every row it writes as a reader will; ε and δ by the
    checks that admit them, :func:`brace._validation.check_privacy_epsilon`)."""
    from ..plan import PRIVATE_METHODS

    if not isinstance(rec, dict):
        raise LedgerError(f"{where}: the record must be a JSON object; got "
                          f"{type(rec).__name__}.")
    for k, typ in _RECORD_FIELDS.items():
        if k not in rec:
            raise LedgerError(f"{where}: the record lacks the field {k!r}.")
        v = rec[k]
        ok = (isinstance(v, typ) and not isinstance(v, bool)) if typ is not float else (
            isinstance(v, int | float) and not isinstance(v, bool))
        if not ok:
            raise LedgerError(f"{where}: field {k!r} must be {typ.__name__}; got {v!r}.")
    if rec["method"] not in (*PRIVATE_METHODS, CELLS_METHOD):
        raise LedgerError(f"{where}: method {rec['method']!r} is not a private method.")
    _int(rec["queries"], f"{where} 'queries'", 1)
    _int(rec["steps"], f"{where} 'steps'", 1)
    _int(rec["dim"], f"{where} 'dim'", 1)
    _checked(check_privacy_epsilon, rec["epsilon"], f"{where} 'epsilon'")
    _checked(check_privacy_delta, rec["delta"], f"{where} 'delta'")
    ev = event_from_dict(rec["event"])
    if isinstance(ev, acc.NonPrivateEvent) or not acc.RdpAccountant().supports(ev):
        raise LedgerError(f"{where}: the event is not a private step event.")
    return rec


def _digest(key: bytes | None, *parts: bytes) -> str:
    h = hmac.new(key, digestmod=hashlib.sha256) if key else hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.hexdigest()


def _canon(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds")


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


class Ledger:
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
    @staticmethod
    def _connect(path: Path, timeout: float, *, mode: str = "rw",
                 immutable: bool = False) -> sqlite3.Connection:
        """A connection in SQLite's URI ``mode`` (``rw`` never creates a file, ``rwc``
        creates, ``ro`` reads only; ``immutable``: no locks, for a file no one writes)."""
        uri = f"file:{urllib.parse.quote(os.fspath(path), safe='/')}?mode={mode}" + (
            "&immutable=1" if immutable else "")
        conn = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None,
                               check_same_thread=False)
        try:
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens the file
        except BaseException:
            conn.close()
            raise
        return conn

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
                conn = cls._connect(tmp, timeout, mode="rwc")
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
                conn = cls._connect(p, timeout)
            else:
                conn = cls._connect_read_only(p, timeout, snapshot=not write)
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

    @classmethod
    def _connect_read_only(cls, p: Path, timeout: float, *, snapshot: bool
                           ) -> sqlite3.Connection:
        """A read-only connection. A WAL ledger in a directory this process may not
        write opens read-only only while its journal files exist and are writable;
        otherwise, where a one-shot read is wanted (``snapshot``: ``brace ledger show``,
        a backup) and its write-ahead log is absent or empty (the main file is
        complete), it is opened immutable; with releases in a log it cannot open, it is
        one clear error."""
        try:
            return cls._connect(p, timeout, mode="ro")
        except sqlite3.OperationalError as exc:
            text = str(exc)
            if not snapshot or not ("unable to open" in text or _is_permission(exc)):
                raise
            wal = Path(os.fspath(p) + "-wal")
            with contextlib.suppress(OSError):
                if wal.stat().st_size > 0:
                    raise LedgerError(
                        f"cannot read ledger {p}: its write-ahead log {wal} holds releases "
                        f"not yet in the main file, and {_who()} may not write the "
                        f"directory {p.parent}, where SQLite needs its journal files to "
                        "read them. Read it as a user who may write that directory (or "
                        "once no process has it open). It was not changed.") from None
        return cls._connect(p, timeout, mode="ro", immutable=True)

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
    @staticmethod
    def _write_meta(conn: sqlite3.Connection, meta: dict[str, Any], key: bytes | None) -> None:
        body = {k: v for k, v in meta.items() if k != "meta_mac"}
        mac = _digest(key, b"meta", _canon(body))
        for k, v in {**body, "meta_mac": mac}.items():
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                         (k, json.dumps(v, allow_nan=False)))

    @staticmethod
    def _read_meta(conn: sqlite3.Connection, p: Path, key: bytes | None) -> dict[str, Any]:
        try:
            rows = conn.execute("SELECT key, value FROM meta").fetchall()
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"{p} is not a brace ledger database ({exc}).") from None
        try:
            meta = {k: json.loads(v) for k, v in rows}
        except (TypeError, ValueError) as exc:
            raise LedgerError(f"ledger {p}: metadata is not valid JSON ({exc}).") from None
        if meta.get("format") != LEDGER_FORMAT:
            raise LedgerError(f"{p} is not a brace ledger (format {meta.get('format')!r}; "
                              f"expected {LEDGER_FORMAT!r}).")
        kind = meta.get("mac")
        if kind == "hmac-sha256" and key is None:
            raise LedgerError(
                f"ledger {p} is keyed (HMAC-SHA256): pass ledger_key= or set "
                f"${KEY_ENV} to open it.")
        if kind == "sha256" and key is not None:
            raise LedgerError(
                f"ledger {p} is not keyed, but a ledger key was given (ledger_key= or "
                f"${KEY_ENV}); open it without a key, or create a keyed ledger.")
        if kind not in ("sha256", "hmac-sha256"):
            raise LedgerError(f"ledger {p}: unknown integrity scheme {kind!r}.")
        body = {k: v for k, v in meta.items() if k != "meta_mac"}
        if not hmac.compare_digest(str(meta.get("meta_mac", "")),
                                   _digest(key, b"meta", _canon(body))):
            raise LedgerError(
                f"ledger {p} fails its integrity check (metadata): it was edited or "
                "damaged" + (", or the key is wrong" if key else "") + ". It was not changed; "
                "restore it from a backup.")
        return check_meta(meta, f"ledger {p}")

    # ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """``BEGIN IMMEDIATE`` … ``COMMIT`` (rolled back on any error). Waits at most
        ``timeout`` seconds for the write lock, then raises :class:`LedgerLockTimeout`.
        Refused on a read-only, closed, deleted or replaced ledger (before anything is
        computed), and again just before the commit if the file was deleted or replaced
        meanwhile."""
        conn = self._live()
        if self.read_only is not None:
            raise LedgerError(
                f"ledger {self.path} is read-only here: {self.read_only}. A release cannot "
                "be recorded, so none was made and nothing was spent.")
        self._check_identity()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
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
            with contextlib.suppress(OSError):
                Path(os.fspath(self.path) + ".holder").unlink()

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

    def _verify_chain(self, rows: list[tuple], after: int, prev_mac: str,
                      unreadable: list[tuple[int, str]] | None = None) -> list[ReleaseRow]:
        """The rows ``after + 1, …`` (id, time, call key, record, blobs, MAC) verified
        along the chain from ``prev_mac`` and against the head in the metadata. With a
        list ``unreadable``, a row whose MAC verifies but whose content does not pass
        :func:`_check_record` (written by an earlier version) is left out and listed
        there as ``(id, why)`` instead of raised (``brace ledger show``)."""
        head = self.meta["head"]
        out: list[ReleaseRow] = []
        mac, expect = prev_mac, after + 1
        for row in rows:
            if row[0] != expect:
                raise LedgerError(
                    f"ledger {self.path}: release {expect} is missing (found {row[0]}): a "
                    "record was deleted. It was not changed; restore it from a backup.")
            mac = self._verify_row(row, mac)
            try:
                out.append(self._parse_row(row))
            except LedgerError as exc:
                if unreadable is None:
                    raise
                unreadable.append((int(row[0]), str(exc)))
            expect += 1
        if expect - 1 != head["count"] or mac != head["mac"]:
            raise LedgerError(
                f"ledger {self.path} fails its integrity check: it holds {expect - 1} "
                f"release(s) but its head says {head['count']}"
                + ("" if expect - 1 != head["count"] else " (a record was edited)")
                + ". It was not changed; restore it from a backup.")
        self._head = dict(head)
        return out

    def _row_mac(self, prev: str, rid: int, time: str, call_key: str, record: str,
                 outputs: bytes, counts: bytes | None, centres: bytes, radii: bytes) -> str:
        return _digest(self._key, b"release", prev.encode(), str(rid).encode(), time.encode(),
                       call_key.encode(), record.encode(), outputs,
                       b"-" if counts is None else b"+" + counts, centres, radii)

    def _verify_row(self, row: tuple, prev: str) -> str:
        rid, time, call_key, record, outputs, counts, centres, radii, mac = row
        try:
            want = self._row_mac(prev, rid, time, call_key, record, bytes(outputs),
                                 None if counts is None else bytes(counts), bytes(centres),
                                 bytes(radii))
        except (TypeError, AttributeError) as exc:
            raise LedgerError(f"ledger {self.path}: release {rid} is malformed ({exc}).") \
                from None
        if not hmac.compare_digest(str(mac), want):
            raise LedgerError(
                f"ledger {self.path} fails its integrity check at release {rid}: it was "
                "edited or damaged" + (", or the key is wrong" if self._key else "")
                + ". It was not changed; restore it from a backup.")
        return want

    def _parse_row(self, row: tuple) -> ReleaseRow:
        rid, time, call_key, record, outputs, counts, centres, radii, _ = row
        where = f"ledger {self.path}, release {rid}"
        try:
            rec = json.loads(record, parse_constant=_reject_constant)
        except ValueError as exc:
            raise LedgerError(f"{where}: the record is not valid JSON ({exc}).") from None
        rec = _check_record(rec, where)  # the check append() ran before writing it
        Q, d = rec["queries"], rec["dim"]
        T = 1 if rec["method"] == "endpoint" else rec["steps"]
        out = _array(outputs, np.float64, (Q, T, d), where, "outputs")
        cnt = None if counts is None else _array(counts, np.int64, (Q, T), where, "counts")
        k = 1 if rec["method"] == CELLS_METHOD else Q * T  # a cell round: one public ball
        c = _array(centres, np.float64, (k, d), where, "footprint centres")
        r = _array(radii, np.float64, (k,), where, "footprint radii", allow_inf=True)
        if not np.all(r > 0):
            raise LedgerError(f"{where}: footprint radii must be > 0.")
        return ReleaseRow(rid, str(time), str(call_key), rec, out, cnt, c, r)

    def append(self, *, call_key: str, record: dict[str, Any], outputs: np.ndarray,
               released_counts: np.ndarray | None, centres: np.ndarray,
               radii: np.ndarray) -> ReleaseRow:
        """Insert one release (inside :meth:`transaction`) and advance the head."""
        head = self.meta["head"]
        rid = int(head["count"]) + 1
        t = now()
        self.appended = True
        rec = json.dumps(record, sort_keys=True, allow_nan=False)
        ob = np.ascontiguousarray(outputs, dtype=np.float64).tobytes()
        cb = None if released_counts is None else np.ascontiguousarray(
            released_counts, dtype=np.int64).tobytes()
        ctb = np.ascontiguousarray(centres, dtype=np.float64).tobytes()
        rb = np.ascontiguousarray(radii, dtype=np.float64).tobytes()
        mac = self._row_mac(str(head["mac"]), rid, t, call_key, rec, ob, cb, ctb, rb)
        row = (rid, t, call_key, rec, ob, cb, ctb, rb, mac)
        parsed = self._parse_row(row)  # as a reader will: nothing unreadable is written
        meta = {**self.meta, "head": {"count": rid, "mac": mac}}
        self._store_row(row, meta)
        self.meta = meta
        return parsed

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

    def backup_to(self, target: str | os.PathLike) -> int:
        """Copy this ledger to a new file ``target`` with SQLite's online backup API (one
        consistent snapshot, also while other processes write), verify the copy (its
        metadata and every release's chain) and publish it atomically. Returns the number
        of releases copied; refuses an existing ``target``."""
        conn = self._live()
        p = Path(os.fspath(target))
        _check_path(p, must_exist=False)
        with _staged(p) as tmp:
            try:
                dst = self._connect(tmp, self.timeout, mode="rwc")
                try:
                    conn.backup(dst)
                finally:
                    dst.close()
            except sqlite3.Error as exc:
                raise LedgerError(f"cannot back up ledger {self.path} to {p}: "
                                  f"{_explain(exc, p, True)}") from None
            copy = Ledger.open(tmp, key=self._key, timeout=self.timeout, write=False)
            try:
                n = len(copy.read_since(0, ""))
            finally:
                copy.close()
        return n



def _reject_constant(name: str) -> float:
    raise LedgerError(f"ledger holds the non-JSON number {name}.")


def _array(blob: Any, dtype: Any, shape: tuple[int, ...], where: str, what: str,
           allow_inf: bool = False) -> np.ndarray:
    if not isinstance(blob, bytes | memoryview):
        raise LedgerError(f"{where}: {what} must be a blob.")
    raw = bytes(blob)
    size = np.dtype(dtype).itemsize
    if len(raw) % size:
        raise LedgerError(f"{where}: {what} is a blob of {len(raw)} bytes, not a whole number "
                          f"of {size}-byte values; expected shape {shape}.")
    a = np.frombuffer(raw, dtype=dtype)
    if a.size != math.prod(shape):
        raise LedgerError(f"{where}: {what} has {a.size} values; expected shape {shape}.")
    a = a.reshape(shape).copy()
    if a.dtype.kind == "f":
        bad = np.isnan(a) if allow_inf else ~np.isfinite(a)
        if np.any(bad):
            raise LedgerError(f"{where}: {what} holds non-finite values.")
    return a


def _check_path(p: Path, *, must_exist: bool) -> None:
    if p.is_dir():
        raise LedgerError(f"ledger path {p} is a directory; give a file name such as "
                          f"{p / 'ledger.db'}.")
    if must_exist:
        if not p.exists():
            raise LedgerError(
                f"ledger {p} does not exist. Create it explicitly (PrivateMemory(..., "
                f"create=True) or 'brace ledger init {p}'); a mistyped path never starts "
                "a fresh budget.")
        try:
            size = os.stat(p).st_size
        except OSError as exc:
            raise LedgerError(f"cannot read ledger {p}: "
                              f"{_access_problem(p) or exc}. It was not changed.") from None
        if size == 0:
            raise LedgerError(f"{p} is empty: not a brace ledger (an interrupted creation "
                              "by another program?). It was not changed.")
        # The file is not read here: SQLite checks it when it is opened. Opening and
        # closing another descriptor of a database file that SQLite holds open in this
        # process drops all of this process's POSIX locks on it; another process closing
        # its connection may then take the file for unused and delete its write-ahead
        # log, with this process's later commits in it (www.sqlite.org/howtocorrupt.html
        # §2.2). The header is read only once SQLite has refused the file (_not_sqlite).
        return
    if p.exists():
        raise LedgerError(f"ledger {p} already exists; open it (create=False) or choose "
                          "another path.")
    if not p.parent.is_dir():
        raise LedgerError(f"cannot create ledger {p}: the directory {p.parent} does not "
                          "exist (it is never created implicitly).")
    if not os.access(p.parent, os.W_OK | os.X_OK):
        raise LedgerError(f"cannot create ledger {p}: permission denied: {_who()} may not "
                          f"write the directory {p.parent}{_mode(p.parent)}.")


def check_meta(meta: dict[str, Any], where: str) -> dict[str, Any]:
    """A ledger's metadata, valid as written (:func:`new_meta`) and as read: budget (by
    :func:`brace._validation.check_budget`, which admits it), fingerprint, head, filter."""
    try:
        b = meta["budget"]
        try:
            check_budget((b["epsilon"], b["delta"]))
        except (TypeError, ValueError) as exc:
            raise LedgerError(f"{where}: {exc}") from None
        _check_fingerprint(meta["fingerprint"], where)
        head = meta["head"]
        _int(head["count"], "head count")
        if not isinstance(head["mac"], str):
            raise LedgerError(f"{where}: the head's digest must be a string.")
        _check_filter(meta["filter"], float(b["delta"]), where)
    except (KeyError, TypeError) as exc:
        raise LedgerError(f"{where} lacks a required field: {exc}.") from None
    return meta


def _check_fingerprint(fp: Any, where: str) -> dict[str, Any]:
    """A bank fingerprint: ``sha256`` (hex), ``shape`` ``[n, d]``, ``dtype``, ``radius``."""
    if not isinstance(fp, dict):
        raise LedgerError(f"{where}: the bank fingerprint must be an object; got {fp!r}.")
    sha = fp.get("sha256")
    if not (isinstance(sha, str) and len(sha) == 64
            and all(c in "0123456789abcdef" for c in sha)):
        raise LedgerError(f"{where}: the fingerprint's 'sha256' must be 64 hex digits; "
                          f"got {sha!r}.")
    shape = fp.get("shape")
    if not (isinstance(shape, list) and len(shape) == 2):
        raise LedgerError(f"{where}: the fingerprint's 'shape' must be [n, d]; got "
                          f"{shape!r}.")
    _int(shape[0], f"{where}: fingerprint n", 1)
    _int(shape[1], f"{where}: fingerprint d", 1)
    if not isinstance(fp.get("dtype"), str):
        raise LedgerError(f"{where}: the fingerprint's 'dtype' must be a string; got "
                          f"{fp.get('dtype')!r}.")
    _num(fp.get("radius"), f"{where}: fingerprint radius", lo=1e-300)
    return fp


def _check_filter(spec: Any, delta: float, where: str) -> dict[str, Any]:
    """A filter: ``orders`` (distinct indices into the filter's order grid) and
    ``delta_direct`` in ``[0, delta)`` (:class:`brace.accounting.filter.FilterSpec`)."""
    from ..accounting.filter import K

    if not isinstance(spec, dict):
        raise LedgerError(f"{where}: the filter must be an object; got {spec!r}.")
    orders = spec.get("orders")
    if not (isinstance(orders, list) and orders
            and all(isinstance(o, int) and not isinstance(o, bool) and 0 <= o < K
                    for o in orders) and len(set(orders)) == len(orders)):
        raise LedgerError(f"{where}: the filter's 'orders' must be a non-empty list of "
                          f"distinct integers in [0, {K}); got {orders!r}.")
    _num(spec.get("delta_direct"), f"{where}: filter delta_direct", hi=delta)
    return spec


def _file_id(p: Path) -> tuple[int, int] | None:
    """``(device, inode)`` of the file ``p`` names, or None if it names none."""
    try:
        st = os.stat(p)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _who() -> str:
    uid = getattr(os, "geteuid", lambda: None)()
    return "this process" if uid is None else f"this process (uid {uid})"


def _mode(p: Path) -> str:
    try:
        st = os.stat(p)
    except OSError:
        return ""
    return f" (mode {st.st_mode & 0o777:04o}, owner uid {st.st_uid})"


def _access_problem(p: Path) -> str | None:
    """A permission problem reading ``p`` (a ledger), or None."""
    if p.exists() and not os.access(p, os.R_OK):
        return f"permission denied: {_who()} may not read {p}{_mode(p)}"
    parent = p.parent
    if not os.access(parent, os.X_OK):
        return f"permission denied: {_who()} may not enter its directory {parent}"
    return None


def _unwritable(p: Path) -> str | None:
    """Why this process may not write the ledger ``p`` (its file, or its directory, where
    SQLite keeps the journal files), or None."""
    problem = _access_problem(p)
    if problem:
        return problem
    if not os.access(p, os.W_OK):
        return f"permission denied: {_who()} may not write {p}{_mode(p)}"
    parent = p.parent
    if not os.access(parent, os.W_OK | os.X_OK):
        return (f"permission denied: {_who()} may not write its directory {parent}"
                f"{_mode(parent)}, where SQLite keeps the ledger's journal files "
                f"({p.name}-wal, {p.name}-shm)")
    return None


def _is_permission(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(w in text for w in ("readonly", "read-only", "permission", "access"))


def _explain(exc: BaseException, p: Path, write: bool) -> str:
    """An SQLite error in words: a permission problem says so."""
    problem = _unwritable(p) if write and p.exists() else _access_problem(p)
    if problem is None and write and not p.exists() and not os.access(p.parent, os.W_OK):
        problem = f"permission denied: {_who()} may not write the directory {p.parent}"
    if problem or _is_permission(exc):
        return problem or f"permission denied ({exc})"
    return str(exc)


@contextlib.contextmanager
def _staged(p: Path) -> Iterator[Path]:
    """A temporary path beside ``p`` to build a ledger in; on success it is published at
    ``p`` (:func:`_publish`). Only the temporary files are ever removed."""
    tmp = p.with_name(f".{p.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        yield tmp
        _publish(tmp, p)
    finally:
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(OSError):
                os.unlink(os.fspath(tmp) + suffix)


def _publish(tmp: Path, p: Path) -> None:
    """Give the complete file ``tmp`` the name ``p``, atomically, refusing an existing
    ``p``: a hard link (fails if ``p`` exists), or where the file system has none, an
    exclusive placeholder replaced by ``tmp``. Then the directory is synced, so the name
    survives a power cut."""
    exists = LedgerError(
        f"ledger {p} already exists (another process may have created it at the same "
        "moment); open it (create=False) or choose another path. Nothing was created.")
    try:
        os.link(tmp, p)
    except FileExistsError:
        raise exists from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS,
                             errno.EMLINK, errno.EXDEV):
            raise LedgerError(f"cannot create ledger {p}: {exc}.") from None
        try:
            os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            raise exists from None
        os.replace(tmp, p)
    with contextlib.suppress(OSError):
        fd = os.open(p.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def new_meta(fingerprint: dict[str, Any], budget: tuple[float, float],
             filter_spec: dict[str, Any], key: bytes | None) -> dict[str, Any]:
    """The metadata of a new, empty ledger (every backend writes the same)."""
    from .._version import __version__

    return check_meta({
        "format": LEDGER_FORMAT,
        "brace_version": __version__,
        "created": now(),
        "fingerprint": fingerprint,
        "budget": {"epsilon": float(budget[0]), "delta": float(budget[1])},
        "filter": filter_spec,
        "mac": "hmac-sha256" if key else "sha256",
        "head": {"count": 0, "mac": ""},
    }, "a new ledger")


def _not_sqlite(p: Path, exc: BaseException) -> LedgerError | None:
    """The clear error for a file that SQLite refused as not a database (``exc``): a JSON
    ledger of an earlier version, or a foreign file; None for anything else. The header
    is read only then, when this process holds no SQLite lock on the file."""
    if "not a database" not in str(exc):
        return None
    try:
        with open(p, "rb") as fh:
            head = fh.read(16)
    except OSError:
        return None
    if head == _SQLITE_MAGIC:
        return None
    if head[:1] in (b"{", b"[", b" ", b"\n"):
        return LedgerError(
            f"{p} looks like a JSON ledger of an earlier version; migrate it with "
            f"'brace ledger migrate {p} NEW.db' (or brace.ledger.migrate_json).")
    return LedgerError(f"{p} is not a brace ledger database (corrupt or foreign).")


def _write_holder(path: Path) -> None:
    with contextlib.suppress(OSError):
        Path(os.fspath(path) + ".holder").write_text(
            json.dumps({"pid": os.getpid(), "since": now()}))


def _holder(path: Path) -> str:
    try:
        info = json.loads(Path(os.fspath(path) + ".holder").read_text())
        return (f"process {int(info['pid'])} holds it (since {info['since']}, per "
                f"{os.fspath(path)}.holder)")
    except (OSError, ValueError, KeyError, TypeError):
        return "another thread or process holds its write lock"


# --------------------------------------------------------------------------------------
# Backups (SQLite files; either backend: brace.ledger.backup)
# --------------------------------------------------------------------------------------


def backup_ledger(source: str | os.PathLike, target: str | os.PathLike, *,
                  key: bytes | str | None = None, timeout: float = 10.0) -> int:
    """Copy the ledger ``source`` to the new file ``target``, safely while it is in use:
    ``source`` is opened read-only, copied in one consistent snapshot (SQLite's online
    backup API), the copy is verified and then published atomically (never a partial
    ``target``; an existing one is refused). Returns the number of releases copied.

    A copy restored later rolls the recorded spend back to the copy's: keep backups as
    carefully as the ledger (``docs/ledger.md``, threat model)."""
    src = Ledger.open(source, key=key, timeout=timeout, write=False)
    try:
        return src.backup_to(target)  # the copy is verified before it is published
    finally:
        src.close()


# --------------------------------------------------------------------------------------
# Ledgers of the earlier JSON format
# --------------------------------------------------------------------------------------


def read_json_ledger(path: str | os.PathLike) -> dict[str, Any]:
    """Read and verify a ledger of the earlier JSON format (``brace-ledger/1``) for
    migration: ``{"fingerprint", "budget", "created", "releases"}``."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"), parse_constant=_reject_constant)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise LedgerError(f"cannot read JSON ledger {p}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != JSON_LEDGER_FORMAT:
        raise LedgerError(f"{p} is not a JSON ledger ({JSON_LEDGER_FORMAT}).")
    body = {k: v for k, v in doc.items() if k != "checksum"}
    blob = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    if doc.get("checksum") != hashlib.sha256(blob.encode()).hexdigest():
        raise LedgerError(f"JSON ledger {p} fails its checksum; it was not migrated.")
    try:
        rel = doc["releases"]
        if not isinstance(rel, list):
            raise LedgerError(f"JSON ledger {p}: 'releases' must be a list.")
        return {"fingerprint": dict(doc["fingerprint"]), "budget": dict(doc["budget"]),
                "created": str(doc["created"]), "releases": rel}
    except (KeyError, TypeError) as exc:
        raise LedgerError(f"JSON ledger {p} lacks a required field: {exc}.") from None
