"""The files of an SQLite ledger: its path checked before it is opened or created,
permission problems in words, a new ledger built beside its name and published
atomically, a foreign file recognised, and who holds the write lock
(``docs/ledger.md`` §4)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import sqlite3
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

from .record import LedgerError, now

_SQLITE_MAGIC = b"SQLite format 3\x00"


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


def connect(path: Path, timeout: float, *, mode: str = "rw",
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


def connect_read_only(p: Path, timeout: float, *, snapshot: bool
                       ) -> sqlite3.Connection:
    """A read-only connection. A WAL ledger in a directory this process may not
    write opens read-only only while its journal files exist and are writable;
    otherwise, where a one-shot read is wanted (``snapshot``: ``brace ledger show``,
    a backup) and its write-ahead log is absent or empty (the main file is
    complete), it is opened immutable; with releases in a log it cannot open, it is
    one clear error."""
    try:
        return connect(p, timeout, mode="ro")
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
    return connect(p, timeout, mode="ro", immutable=True)
