"""The chain of a ledger, for every backend: each release row's MAC chained to the
previous one and the head in the metadata (keyed HMAC-SHA256 or SHA-256), the
metadata's own MAC, and :meth:`Chain.append`, which parses each row it builds exactly as
a reader will before writing it (``docs/ledger.md`` §5)."""

from __future__ import annotations

import hmac
import json
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np

from .record import (
    KEY_ENV,
    LEDGER_FORMAT,
    LedgerError,
    ReleaseRow,
    _canon,
    _digest,
    check_meta,
    now,
    parse_row,
)

__all__ = ["Chain"]


class Chain:
    """Mixin of a ledger (``path``, ``meta``, ``_key``, ``_store_row``): the chain."""

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
        return parse_row(row, f"ledger {self.path}, release {row[0]}")

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
