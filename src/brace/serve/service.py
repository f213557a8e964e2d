"""The service behind ``brace serve``, without HTTP: the bank, one
:class:`~brace.PrivateMemory` on the ledger, the published synopsis, and the operations
the routes call (``docs/deploying.md``).

Every release is exact discrete noise from the operating system (``noise="secure"``):
the server never uses a seed. Responses hold released values and public accounting
only: no seed, no diagnostics. An error after a call is admitted is never described
(:class:`ReleaseFailed`): what failed in a computation that read the bank could depend
on it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from .._io import atomic_write_text, load_npy, strict_json
from ..budget import AdmittedCallFailed, BudgetExceededError, PrivateMemory
from ..ledger import CELLS_METHOD, PENDING, LedgerError
from ..ledger.backend import LedgerUnavailable, is_server_url, ledger_class, redact_url
from ..memory import frozen_bank
from ..synopsis import Synopsis
from .keys import KeyRing, load_keys
from .requests import CompleteRequest, Limits, RetrieveRequest, SnapshotRequest

__all__ = ["ServeConfig", "Service", "ServedMemory", "ReleaseFailed", "SnapshotExists",
           "NotPublished", "NoSynopsis", "load_bank", "public_params"]

CONFIG_ENV = "BRACE_SERVE_CONFIG"
log = logging.getLogger("brace.serve")


@dataclasses.dataclass(frozen=True)
class ServeConfig:
    """What ``brace serve`` was started with (passed to worker processes as JSON)."""

    bank: str
    radius: float
    ledger: str
    keys: str
    limits: Limits = Limits()
    lock_timeout: float = 60.0
    accounting: str = "local"
    log_level: str = "info"
    bank_mode: str = "copy"  # "copy": an immutable copy in memory; "mmap": mapped

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ServeConfig:
        data = json.loads(text)
        return cls(**{**data, "limits": Limits(**data["limits"])})


class ReleaseFailed(RuntimeError):
    """A call that was admitted failed while computing: nothing was released or spent,
    and the reason is logged, not returned."""


class SnapshotExists(RuntimeError):
    """A synopsis was already released from this ledger."""


class NotPublished(RuntimeError):
    """A synopsis was released and charged (its rounds are in the ledger) but could not
    be published; the reason is logged, not returned."""


class NoSynopsis(LookupError):
    """No synopsis has been published."""


class ServedMemory(PrivateMemory):
    """:class:`PrivateMemory` as the server uses it: it tells whether a call was a free
    repeat (and of which release), refuses a second snapshot inside the ledger's
    transaction, and hides the cause of an error after admission (of a retrieval, or of
    a snapshot's releases: :meth:`_after_admission`)."""

    _served_repeat: int | None = None
    _snapshot_once: bool = False

    def _repeat(self, pos: int, q: np.ndarray) -> Any:
        self._served_repeat = pos + 1
        return super()._repeat(pos, q)

    @staticmethod
    def _hiding(fn: Any, /, *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except (BudgetExceededError, LedgerError, AdmittedCallFailed):
            raise  # the last: charged, its message fixed (the cause is logged only)
        except Exception as exc:
            raise ReleaseFailed("the release failed after it was admitted; nothing was "
                                "released or spent.") from exc

    def _admit_and_run(self, *args: Any, **kw: Any) -> Any:  # a retrieval
        return self._hiding(super()._admit_and_run, *args, **kw)

    def _after_admission(self, fn: Any, /, *args: Any, **kw: Any) -> Any:  # a snapshot
        return self._hiding(super()._after_admission, fn, *args, **kw)

    def _sync(self) -> None:
        super()._sync()
        if self._snapshot_once and any(_released_cells(r) for r in self._rows):
            # inside the ledger's transactions (admission, and the release's record)
            raise SnapshotExists(
                "a synopsis was already released from this ledger (GET /v1/synopsis); "
                "POST /v1/snapshot with \"again\": true releases another, paid again.")


def _released_cells(record: dict[str, Any]) -> bool:
    """A synopsis's release, not a pending charge (one still running, or that failed after
    admission: docs/ledger.md §4.1) — the reading rule's test, ``PENDING in params``."""
    return record["method"] == CELLS_METHOD and PENDING not in record["params"]


BANK_MODES = ("copy", "mmap")


def load_bank(path: str | os.PathLike, mode: str = "copy") -> np.ndarray:
    """The bank: a ``.npy`` memory-mapped read-only, or anything
    :func:`brace._io.load_npy` reads. ``mode="copy"`` (the default) returns an immutable
    in-memory copy (:func:`brace.frozen_bank`): a call then skips the re-hash of the
    whole bank at its entry and exit that guards a mutable or mapped bank against edits
    (about 60 ms of an 80 ms call at n = 10⁵, d = 64), at the cost of holding the bank in
    each server process's memory. ``mode="mmap"`` keeps a ``.npy`` mapped (for banks
    larger than memory) and re-hashed at every call."""
    if mode not in BANK_MODES:
        raise ValueError(f"bank mode must be one of {BANK_MODES}; got {mode!r}.")
    p = Path(path)
    bank: Any = None
    if p.suffix.lower() == ".npy" and p.is_file():
        with open(p, "rb") as fh:
            magic = fh.read(6)
        if magic == b"\x93NUMPY":
            try:
                bank = np.load(p, mmap_mode="r", allow_pickle=False)
            except Exception as exc:  # numpy raises several types for damaged files
                raise ValueError(f"cannot read bank file {p}: {exc}") from None
    if bank is None and mode == "mmap" and p.is_file():
        raise ValueError(f"bank mode mmap needs a .npy bank (numpy.save), which can be "
                         f"memory-mapped; {p} is not one. Use the copy mode, or save the "
                         "bank as .npy.")
    if bank is None:
        bank = load_npy(p, "bank")
    if mode == "copy" and getattr(bank, "ndim", 0) == 2:
        bank = frozen_bank(bank)  # read from the map straight into the immutable copy
    return bank


_SECRET_PARAMS = ("seed", "seed_null_reason", "seed_record")


def public_params(params: dict[str, Any]) -> dict[str, Any]:
    """A release's parameters without anything about seeds (there are none)."""
    return {k: v for k, v in params.items() if k not in _SECRET_PARAMS}


def _finite(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


class _FileStore:
    """The published synopsis of an SQLite ledger ``L``: ``L.synopsis.json``, replaced
    atomically (public content)."""

    def __init__(self, ledger: str | os.PathLike) -> None:
        self.path = Path(os.fspath(ledger) + ".synopsis.json")

    def get(self) -> tuple[str, str] | None:
        try:
            st = self.path.stat()
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        return f"{st.st_ino}:{st.st_mtime_ns}:{st.st_size}", text

    def put(self, text: str) -> None:
        atomic_write_text(self.path, text)

    def close(self) -> None:
        pass


class _PgStore:
    """The published synopsis of a PostgreSQL ledger: table ``service_synopsis`` in the
    ledger's schema (public content)."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url, self.timeout = url, timeout
        self._conn = None
        self._lock = threading.Lock()

    def _run(self, fn: Any) -> Any:
        import psycopg
        from psycopg import sql

        from ..ledger.pg import PgLedger

        with self._lock:
            for attempt in (0, 1):
                try:
                    if self._conn is None or self._conn.closed or self._conn.broken:
                        self._conn, schema = PgLedger._pg_connect(self.url, self.timeout)
                        self._table = sql.Identifier(schema, "service_synopsis")
                        self._conn.execute(sql.SQL(
                            "CREATE TABLE IF NOT EXISTS {} (id INT PRIMARY KEY CHECK "
                            "(id = 1), time TEXT NOT NULL, body TEXT NOT NULL)"
                        ).format(self._table))
                    return fn(self._conn, self._table, sql)
                except psycopg.OperationalError as exc:
                    if attempt:
                        raise LedgerUnavailable(
                            f"the ledger's database {redact_url(self.url)} is unavailable "
                            f"({str(exc).strip().splitlines()[0]}).") from None
                    with contextlib.suppress(Exception):
                        self._conn.close()
                    self._conn = None

    def get(self) -> tuple[str, str] | None:
        row = self._run(lambda c, t, sql: c.execute(
            sql.SQL("SELECT time, body FROM {} WHERE id = 1").format(t)).fetchone())
        return None if row is None else (row[0], row[1])

    def put(self, text: str) -> None:
        from ..ledger import now

        self._run(lambda c, t, sql: c.execute(sql.SQL(
            "INSERT INTO {} (id, time, body) VALUES (1, %s, %s) ON CONFLICT (id) DO UPDATE "
            "SET time = EXCLUDED.time, body = EXCLUDED.body").format(t), (now(), text)))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self._conn is not None:
                self._conn.close()


class Service:
    """One server process's state: keys, bank, the memory on the ledger, the synopsis.

    Opening it checks everything a deployment can get wrong: the keys file, the bank,
    and that the ledger is this bank's (fingerprint, radius) — a foreign ledger is a
    :class:`~brace.ledger.LedgerError`. The budget is the ledger's own.
    """

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.keys: KeyRing
        self.keys, self.key_warnings = load_keys(config.keys)
        self.bank = load_bank(config.bank, config.bank_mode)
        if getattr(self.bank, "ndim", 0) != 2:
            raise ValueError(f"the bank {config.bank} must be a 2-D array (n, d); got shape "
                             f"{getattr(self.bank, 'shape', None)}.")
        self.dim = int(self.bank.shape[1])
        self.ledger_name = (redact_url(config.ledger) if is_server_url(config.ledger)
                            else config.ledger)
        db = ledger_class(config.ledger).open(config.ledger, timeout=config.lock_timeout)
        try:
            b = db.meta["budget"]
        finally:
            db.close()
        self.pm = ServedMemory(self.bank, radius=config.radius,
                               budget=(float(b["epsilon"]), float(b["delta"])),
                               ledger=config.ledger, lock_timeout=config.lock_timeout,
                               accounting=config.accounting)
        self.store = (_PgStore(config.ledger, config.lock_timeout)
                      if is_server_url(config.ledger) else _FileStore(config.ledger))
        self._synopsis: tuple[str, dict[str, Any], Synopsis] | None = None
        self._probe: tuple[float, bool, str] = (-math.inf, True, "ok")
        self._verified: tuple[int, str] = (0, "")  # the releases the probe has read

    def close(self) -> None:
        self.pm.close()
        self.store.close()

    # ----------------------------------------------------------------------------------
    def retrieve(self, req: RetrieveRequest) -> dict[str, Any]:
        """One private release (or a free repeat of a recorded one), recorded in the
        ledger before it is returned."""
        pm = self.pm
        kw = {} if req.release is None else {"release": req.release}
        with pm._locked():
            pm._served_repeat = None
            t0 = time.perf_counter()
            res = pm.retrieve(req.queries, steps=req.steps, epsilon=req.epsilon,
                              delta=req.delta, method=req.method, noise="secure", **kw)
            spent_ms = 1e3 * (time.perf_counter() - t0)
            repeat = pm._served_repeat
            rid = repeat if repeat is not None else pm._last_id
        log.debug("release %d%s: PrivateMemory.retrieve %.2f ms", rid,
                  " (repeat)" if repeat is not None else "", spent_ms)
        out = res.to_dict()
        out.pop("queries", None)  # the caller's own
        out["params"] = public_params(out["params"])
        out["release_id"] = int(rid)
        out["repeat"] = repeat is not None
        return out

    def budget(self) -> dict[str, Any]:
        pm = self.pm
        with pm._locked():
            spent = pm.spent  # brought up to date from the ledger
            n = len(pm._rows)
        eps, delta = pm.budget
        return {"spent": _finite(spent), "remaining": max(0.0, eps - spent),
                "epsilon": eps, "delta": delta, "releases": n}

    def snapshot(self, req: SnapshotRequest) -> dict[str, Any]:
        """Release a synopsis (once, unless ``again``), charged to the budget, and
        publish it (:class:`NotPublished` if that fails: it was released all the same)."""
        pm = self.pm
        with pm._locked():
            pm._snapshot_once = not req.again
            try:
                syn = pm.snapshot(**req.kwargs, noise="secure")
            finally:
                pm._snapshot_once = False
        try:  # recorded and charged: from here on, a failure must not say otherwise
            body = strict_json(self._public_synopsis(syn))  # NaN/inf: null and a reason
            self.store.put(json.dumps(body, allow_nan=False))
        except Exception as exc:
            raise NotPublished("the synopsis was released but not published.") from exc
        return body

    @staticmethod
    def _public_synopsis(syn: Synopsis) -> dict[str, Any]:
        d = syn.to_dict()  # the seed record withheld
        d["params"] = public_params(d["params"])
        return d

    def _load_synopsis(self) -> tuple[dict[str, Any], Synopsis]:
        got = self.store.get()
        if got is None:
            with self.pm._locked():
                self.pm._sync_outside()
                released = any(_released_cells(r) for r in self.pm._rows)
            raise NoSynopsis(
                "a synopsis was released (its rounds are in the ledger) but not published: "
                "the server stopped before storing it. POST /v1/snapshot with \"again\": "
                "true releases another." if released else
                "no synopsis has been released yet (an admin releases one with POST "
                "/v1/snapshot).")
        tag, text = got
        cached = self._synopsis
        if cached is None or cached[0] != tag:
            body = json.loads(text)
            cached = (tag, body, Synopsis.from_dict(body))
            self._synopsis = cached
        return cached[1], cached[2]

    def synopsis(self) -> dict[str, Any]:
        return self._load_synopsis()[0]

    def complete(self, req: CompleteRequest) -> dict[str, Any]:
        """Completions from the published synopsis: post-processing, free."""
        _, syn = self._load_synopsis()
        out = syn.complete(req.queries, how=req.how, steps=req.steps)
        return {"completions": np.atleast_2d(out).tolist(), "how": req.how,
                "epsilon": 0.0, "note": "answered from the published synopsis: free"}

    def probe(self) -> tuple[bool, str]:
        """Whether the ledger answers and reads whole (opened by a separate connection,
        its metadata and every release verified: those seen before from where the last
        probe ended), at most once a second."""
        t, ok, what = self._probe
        if time.monotonic() - t < 1.0:
            return ok, what
        try:
            db = ledger_class(self.config.ledger).open(self.config.ledger, timeout=2.0)
            try:
                with db.read_view():
                    db.refresh_meta()
                    try:
                        db.read_since(*self._verified)
                    except LedgerError:  # restored or replaced meanwhile: read it all
                        db.read_since(0, "")
                    self._verified = (db.meta["head"]["count"], db.meta["head"]["mac"])
            finally:
                db.close()
            ok, what = True, "ok"
        except LedgerUnavailable:
            ok, what = False, "unavailable"
        except LedgerError:
            ok, what = False, "failed its check"
        self._probe = (time.monotonic(), ok, what)
        return ok, what

    def describe(self) -> str:
        fp = self.pm.fingerprint
        eps, delta = self.pm.budget
        held = ("an immutable copy in memory" if self.config.bank_mode == "copy"
                else "memory-mapped")
        return (f"bank {self.config.bank} (n = {fp['shape'][0]}, d = {fp['shape'][1]}, "
                f"sha256 {fp['sha256'][:12]}…, radius {self.config.radius:g}, {held}); "
                "ledger "
                f"{self.ledger_name}, budget ({eps:g}, {delta:g}); {len(self.keys)} key(s)")
