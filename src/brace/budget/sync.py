"""Ledger synchronisation of :class:`brace.PrivateMemory`: the lock, the binding check,
reading what other processes recorded, absorbing records into the footprint index,
recording a release and answering a free repeat from the record
(``docs/ledger.md``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import ledger as _ledger
from ..accounting import PrivacySpent
from ..accounting.filter import FootprintIndex, K
from ..ledger.pending import PendingCharges
from ..ledger.state import weights
from ..mechanisms import DIAGNOSTIC_FIELDS, PrivateRetrievalResult
from .admission import CHARGED_FAILURE, AdmittedCallFailed


class LedgerSync:
    """Mixin: the state :class:`brace.PrivateMemory` keeps in step with its ledger
    (``_db``, ``_records``, ``_keys``, ``_results``, ``_index``, ``_pending``,
    ``_last_id``/``_last_mac``)."""

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The object's lock (threads), waiting at most ``lock_timeout`` seconds."""
        t = self._lock_timeout
        if not self._lock.acquire(timeout=t if t > 0 else -1):
            raise _ledger.LedgerLockTimeout(
                f"could not acquire the PrivateMemory's lock within {t:g} s: another "
                "thread of this process holds it.")
        try:
            yield
        finally:
            self._lock.release()

    def _check_binding(self, meta: dict[str, Any]) -> None:
        fp = meta["fingerprint"]
        path = self._db.path if self._db is not None else "?"
        if fp.get("sha256") != self._fingerprint["sha256"]:
            raise _ledger.LedgerError(
                f"ledger {path} belongs to another bank: its fingerprint is "
                f"{fp.get('sha256')} (shape {fp.get('shape')}, radius {fp.get('radius')}), "
                f"this bank's is {self._fingerprint['sha256']} (shape "
                f"{self._fingerprint['shape']}, radius {self._fingerprint['radius']}). Use "
                "the ledger of this bank, or create a new one.")
        b = meta["budget"]
        if (float(b["epsilon"]), float(b["delta"])) != self._budget:
            raise _ledger.LedgerError(
                f"ledger {path} was created with budget ({b['epsilon']:g}, {b['delta']:g}); "
                f"it was opened with ({self._budget[0]:g}, {self._budget[1]:g}). A ledger's "
                "budget is fixed when it is created.")

    def _sync_outside(self) -> None:
        if self._db is not None:
            with self._db.read_view():  # the head and the rows of one moment
                self._db.refresh_meta()
                self._check_binding(self._db.meta)
                self._sync()

    @contextlib.contextmanager
    def _ledger_call(self, durable: bool = True) -> Iterator[None]:
        """The ledger's transaction (``durable=False``: a pending charge's, committed
        without an fsync, ``docs/ledger.md`` §4.1). If it fails after this call appended
        a row (a failed ``COMMIT``: disk full, a lost database connection), the
        in-memory state — which took the row in — is forgotten and re-read from the
        ledger on the next call, so that nothing uncommitted is ever counted as recorded
        or answered as a repeat. A call refused before appending keeps it (the rows it
        read from other processes are committed)."""
        try:
            with self._db.transaction(durable=durable):
                yield
        except BaseException:
            if self._db.appended:
                self._forget()
            raise

    def _forget(self) -> None:
        """Drop the in-memory copy of the ledger (read again in full by the next sync)."""
        self._index = FootprintIndex(self._dim)
        self._records, self._keys, self._results = {}, {}, {}
        self._pending = PendingCharges()
        self._last_id, self._last_mac = 0, ""
        self._worst_cache = None

    @property
    def _rows(self) -> list[dict[str, Any]]:
        """The records a reader counts, in order: every release, and every pending
        charge no completion replaced (``docs/ledger.md`` §4.1)."""
        return list(self._records.values())

    def _sync(self) -> None:
        """Read the releases other processes recorded since the last look (everything,
        after :meth:`_forget`)."""
        rows = self._db.read_since(self._last_id, self._last_mac)
        if not rows:
            return
        self._absorb([(r.id, r.record, r.call_key, r.centres, r.radii) for r in rows])
        self._last_id = rows[-1].id
        self._last_mac = self._db.meta["head"]["mac"]

    def _absorb(self, rows: list[tuple[int, dict[str, Any], str, np.ndarray, np.ndarray]]
                ) -> None:
        """Take rows ``(id, record, call key, footprint centres, radii)`` in, in id order,
        by the two-phase record's rule (:class:`~brace.ledger.PendingCharges`): a pending
        charge is kept out of the footprint index, in :attr:`_pending`, and charged as
        extra terms of the worst pair until its completion is read, which replaces it;
        every other row goes to the index (one bulk update: a KD-tree proposes
        neighbours in bulk) and, with its call key, to the free repeats."""
        where = f"ledger {self._db.path if self._db is not None else '(memory)'}"
        add = []
        for rid, record, key, centres, radii in rows:
            w = weights(_ledger.event_from_dict(record["event"]))
            terms = (centres, radii, np.broadcast_to(w, (radii.shape[0], K + 1)))
            pending, done = self._pending.read(rid, record, terms, f"{where}, release {rid}")
            for pid, _ in done:
                self._records.pop(pid, None)
            self._records[rid] = record
            if not pending:
                self._keys.setdefault(key, rid - 1)
                add.append(terms)
        if add:
            self._index.add(np.concatenate([t[0] for t in add]),
                            np.concatenate([t[1] for t in add]),
                            np.concatenate([t[2] for t in add]),
                            local=self._accounting == "local")
        self._worst_cache = None

    def _worst_now(self) -> np.ndarray:
        with self._locked():
            self._sync_outside()
            return self._worst(())

    # ----------------------------------------------------------------------------------
    # the two-phase record of an admitted call (docs/ledger.md §4.1)

    @contextlib.contextmanager
    def _admission(self) -> Iterator[None]:
        """Phase 1: the ledger's transaction in which a call is priced and its charge
        appended as pending rows (:meth:`_reserve`), committed — without an fsync —
        when the block ends, before the bank is read. Without a ledger: nothing."""
        if self._db is None:
            yield
            return
        with self._ledger_call(durable=False):
            self._check_binding(self._db.meta)
            self._sync()
            yield

    def _reserve(self, charge: list[tuple]) -> list[int]:
        """Record ``charge`` — rows ``(record, call key, footprint centres, radii,
        outputs, counts)``: the call's admitted events at its reserved footprints, zero
        outputs, built before the bank is read — as pending rows (inside
        :meth:`_admission`) and count them from now on; their ids."""
        rows = []
        for record, key, centres, radii, outputs, counts in charge:
            rec = {**record, "params": {**record["params"],
                                        _ledger.PENDING: _ledger.PENDING_NOTE}}
            rows.append(self._append(rec, f"pending:{key}", centres, radii, outputs,
                                     counts))
        self._absorb(rows)
        return [r[0] for r in rows]

    def _complete(self, pending: list[int], rows: list[tuple]) -> list[int]:
        """Phase 2: record the call's releases ``rows`` (as :meth:`_reserve`'s), each
        naming the pending row it replaces (``params["completes"]``), in a durable
        transaction, before anything is returned; their ids. If this fails the pending
        charge stands: :class:`AdmittedCallFailed`."""
        try:
            done = [({**r[0], "params": {**r[0]["params"], _ledger.COMPLETES: [pid]}}, *r[1:])
                    for r, pid in zip(rows, pending, strict=True)]
            self._check_completes(pending, done)
            if self._db is None:
                got = [self._append(*r) for r in done]
                self._absorb(got)
                return [g[0] for g in got]
            with self._ledger_call():
                self._check_binding(self._db.meta)
                self._sync()
                got = [self._append(*r) for r in done]
                self._absorb(got)
        except Exception as exc:  # admitted and charged (the pending rows stand)
            raise AdmittedCallFailed(CHARGED_FAILURE) from exc
        return [g[0] for g in got]

    def _check_completes(self, pending: list[int], done: list[tuple]) -> None:
        """A completion replaces its pending charge only with the same event on as many
        footprints (the reading rule would take a smaller one as it is): checked for every
        admitted path here."""
        for (record, _key, _c, radii, *_), pid in zip(done, pending, strict=True):
            was = self._records.get(pid)
            if pid not in self._pending.open or was is None \
                    or record["event"] != was["event"] \
                    or len(np.asarray(radii)) != len(self._pending.open[pid][1]):
                raise RuntimeError("the releases differ from the admitted charge")

    def _append(self, record: dict[str, Any], key: str, centres: np.ndarray,
                radii: np.ndarray, outputs: np.ndarray, counts: np.ndarray | None
                ) -> tuple[int, dict[str, Any], str, np.ndarray, np.ndarray]:
        """One row appended (to the ledger, inside its transaction; or numbered in
        memory); ``(id, record, call key, centres, radii)`` for :meth:`_absorb`."""
        centres, radii = np.asarray(centres), np.asarray(radii)
        if self._db is None:
            self._last_id += 1
            return (self._last_id, record, key, centres, radii)
        row = self._db.append(call_key=key, record=record, outputs=outputs,
                              released_counts=counts, centres=centres, radii=radii)
        self._last_id, self._last_mac = row.id, self._db.meta["head"]["mac"]
        return (row.id, row.record, key, centres, radii)

    def _record(self, method, q, T, eps, dlt, plan, res) -> dict[str, Any]:
        public = res.to_dict()
        return {
            "method": method,
            "queries": int(q.shape[0]),
            "steps": T,
            "dim": self._dim,
            "epsilon": eps,
            "delta": dlt,
            "release": plan.release,
            "event": _ledger.event_to_dict(plan.spent.step_event),
            # no seed: it regenerates the noise of the release (docs/ledger.md)
            "params": {k: v for k, v in public["params"].items() if k != "seed"},
            "privacy": public["privacy"],
            # secure mode: the public grid unit of each released step (for repeats)
            **({} if res.grid is None else {"grid": np.asarray(res.grid).tolist()}),
        }

    def _repeat(self, pos: int, q: np.ndarray) -> PrivateRetrievalResult:
        """The recorded release at ``pos`` (its id − 1; post-processing: free). Only a
        completed release is one (a pending charge's call key is no call's)."""
        if self._db is None:
            return self._results[pos]

        rec = self._records[pos + 1]
        outputs, counts = self._db.arrays(pos + 1)
        return PrivateRetrievalResult(
            method=rec["method"], is_private=True, outputs=outputs,
            privacy=PrivacySpent.from_dict(rec["privacy"]), params=dict(rec["params"]),
            queries=q.copy(), released_counts=counts,
            grid=None if "grid" not in rec else np.asarray(rec["grid"], dtype=np.float64),
            **dict.fromkeys(DIAGNOSTIC_FIELDS))
