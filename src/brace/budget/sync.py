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
from ..ledger.state import weights
from ..mechanisms import DIAGNOSTIC_FIELDS, PrivateRetrievalResult
from .admission import AdmittedCallFailed


class LedgerSync:
    """Mixin: the state :class:`brace.PrivateMemory` keeps in step with its ledger
    (``_db``, ``_rows``, ``_keys``, ``_results``, ``_index``, ``_last_id``/``_last_mac``)."""

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
    def _ledger_call(self) -> Iterator[None]:
        """The ledger's transaction. If it fails after this call appended a release (a
        failed ``COMMIT``: disk full, a lost database connection), the in-memory state —
        which took the release in — is forgotten and re-read from the ledger on the next
        call, so that nothing uncommitted is ever counted as recorded or answered as a
        repeat. A call refused before appending keeps it (the rows it read from other
        processes are committed). A call that failed after admission
        (:class:`~brace.budget.admission.AdmittedCallFailed`) commits the charge it
        appended, then raises."""
        charged = None
        try:
            with self._db.transaction():
                try:
                    yield
                except AdmittedCallFailed as exc:  # its charge is appended: commit it
                    charged = exc
        except BaseException:
            if self._db.appended:
                self._forget()
            raise
        if charged is not None:
            raise charged

    def _forget(self) -> None:
        """Drop the in-memory copy of the ledger (read again in full by the next sync)."""
        self._index = FootprintIndex(self._dim)
        self._rows, self._keys, self._results = [], {}, {}
        self._last_id, self._last_mac = 0, ""
        self._worst_cache = None

    def _sync(self) -> None:
        """Read the releases other processes recorded since the last look (everything,
        after :meth:`_forget`)."""
        rows = self._db.read_since(self._last_id, self._last_mac)
        if not rows:
            return
        self._absorb([(r.record, r.call_key, r.centres, r.radii) for r in rows])
        self._last_id = rows[-1].id
        self._last_mac = self._db.meta["head"]["mac"]

    def _absorb(self, rows: list[tuple[dict[str, Any], str, np.ndarray, np.ndarray]]
                ) -> None:
        """Record releases ``(record, call key, footprint centres, radii)`` in memory: one
        bulk update of the footprint index (a KD-tree proposes neighbours in bulk)."""
        ws = []
        for record, key, _, radii in rows:
            self._keys.setdefault(key, len(self._rows))
            self._rows.append(record)
            w = weights(_ledger.event_from_dict(record["event"]))
            ws.append(np.broadcast_to(w, (radii.shape[0], K + 1)))
        self._index.add(np.concatenate([r[2] for r in rows]),
                        np.concatenate([r[3] for r in rows]), np.concatenate(ws),
                        local=self._accounting == "local")
        self._worst_cache = None

    def _worst_now(self) -> np.ndarray:
        with self._locked():
            self._sync_outside()
            return self._worst(())


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
        """The recorded release at ``pos`` (post-processing: free)."""
        if self._db is None:
            return self._results[pos]

        rec = self._rows[pos]
        outputs, counts = self._db.arrays(pos + 1)
        return PrivateRetrievalResult(
            method=rec["method"], is_private=True, outputs=outputs,
            privacy=PrivacySpent.from_dict(rec["privacy"]), params=dict(rec["params"]),
            queries=q.copy(), released_counts=counts,
            grid=None if "grid" not in rec else np.asarray(rec["grid"], dtype=np.float64),
            **dict.fromkeys(DIAGNOSTIC_FIELDS))
