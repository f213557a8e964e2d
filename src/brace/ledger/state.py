"""A ledger read without its bank: :class:`LedgerState`, :func:`inspect_ledger` and
:func:`migrate_json_ledger` (``docs/ledger.md``), and the cached filter weights of an
event that :class:`brace.PrivateMemory` and these share."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from .. import accounting as acc_events
from .._validation import check_budget
from ..accounting.filter import FilterSpec, FootprintIndex, K, convert, event_weights
from . import record as _ledger
from .backend import ledger_class
from .pending import settle
from .record import JSON_LEDGER_FORMAT, _reject_constant
from .sqlite import Ledger

__all__ = ["LedgerState", "inspect_ledger", "migrate_json_ledger", "read_json_ledger",
           "check_budget",
           "plural", "weights"]


def plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else plural or word + 's'}"


_WEIGHTS: dict[Any, np.ndarray] = {}


def weights(event: Any) -> np.ndarray:
    got = _WEIGHTS.get(event)
    if got is None:
        got = event_weights(event)
        got.setflags(write=False)
        if len(_WEIGHTS) < 4096:
            _WEIGHTS[event] = got
    return got


@dataclasses.dataclass(frozen=True)
class LedgerState:
    """A ledger as read from disk (no bank needed): its binding, budget, filter, records
    and what they spend under both accountings (ε at the budget's δ, worst pair)."""

    path: str
    fingerprint: dict[str, Any]
    budget_epsilon: float
    budget_delta: float
    filter: dict[str, Any]
    created: str
    releases: tuple[dict[str, Any], ...]
    spent_local: float
    spent_global: float
    #: ``(id, why)`` of each release whose chain verifies but whose record cannot be
    #: read (written by an earlier version; ``docs/ledger.md``, "Repairing a ledger"):
    #: left out of the spend, which is then a lower bound
    unreadable: tuple[tuple[int, str], ...] = ()
    #: the ledger id of each record in :attr:`releases`
    ids: tuple[int, ...] = ()
    #: ids of the pending charges no completion replaced: calls admitted and charged
    #: that failed, died or are still running (``docs/ledger.md`` §4.1)
    pending: tuple[int, ...] = ()
    #: rows stored (releases, pending charges and the completions that replace them)
    stored: int = 0

    @property
    def remaining(self) -> float:
        """``budget ε − spent_local`` (≥ 0): local never reports more than global."""
        return max(0.0, self.budget_epsilon - self.spent_local)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path, "fingerprint": dict(self.fingerprint),
            "budget": {"epsilon": self.budget_epsilon, "delta": self.budget_delta},
            "filter": dict(self.filter), "created": self.created,
            "releases": [dict(r) for r in self.releases],
            "spent_local_epsilon": _finite(self.spent_local),
            "spent_global_epsilon": _finite(self.spent_global),
            "remaining_epsilon": self.remaining, "at_delta": self.budget_delta,
            "unreadable": [{"release": i, "reason": why} for i, why in self.unreadable],
            "ids": list(self.ids), "pending": list(self.pending), "stored": self.stored,
        }

    def summary(self, last: int = 20) -> str:
        fp = self.fingerprint
        lines = [
            f"ledger {self.path}",
            f"  bank fingerprint : sha256 {fp.get('sha256')}",
            f"                     shape {tuple(fp.get('shape', ()))}, dtype "
            f"{fp.get('dtype')}, radius {fp.get('radius')}",
            f"  budget           : ({self.budget_epsilon:g}, {self.budget_delta:g})-DP over "
            "the whole adaptive history (privacy filter, docs/privacy-accounting.md §12)",
            f"  releases         : {len(self.releases)}" + (
                f" readable, {len(self.unreadable)} unreadable" if self.unreadable else "")
            + (f", of which {plural(len(self.pending), 'pending charge')} (admitted and "
               "charged, nothing released)" if self.pending else ""),
        ]
        shown = self.releases[-last:]
        first = len(self.releases) - len(shown) + 1
        ids = self.ids or tuple(range(1, len(self.releases) + 1))
        if first > 1:
            lines.append(f"    ... {first - 1} earlier release(s) not shown")
        for i, r in zip(ids[first - 1:], shown, strict=True):
            if i in self.pending:
                what = "still running, or failed or died after admission"
                lines.append(f"    {i:>5}. PENDING CHARGE ({what}): method={r['method']}  "
                             f"{plural(r['queries'], 'query', 'queries')} x "
                             f"{plural(r['steps'], 'step')}  ({r['epsilon']:.4g}, "
                             f"{r['delta']:g}) charged at its reserved footprints, nothing "
                             "released")
                continue
            if r["method"] == _ledger.CELLS_METHOD and r["params"].get("kind") == "moments":
                lines.append(f"    {i:>5}. synopsis second moments ({r['dim']} x "
                             f"{r['dim']}, private subspace): one Gaussian release "
                             f"({r['epsilon']:.4g}, {r['delta']:g})")
                continue
            if r["method"] == _ledger.CELLS_METHOD:
                lines.append(f"    {i:>5}. synopsis cell round {r['params'].get('round')}: "
                             f"{plural(r['queries'], 'cell')}, one Gaussian release "
                             f"({r['epsilon']:.4g}, {r['delta']:g})")
                continue
            lines.append(
                f"    {i:>5}. method={r['method']}  release={r.get('release')}  "
                f"{plural(r['queries'], 'query', 'queries')} x "
                f"{plural(r['steps'], 'step')}  per query ({r['epsilon']:g}, "
                f"{r['delta']:g})")
        lines += [
            f"  spent (local)    : eps = {self.spent_local:.6g} at delta = "
            f"{self.budget_delta:g} (worst pair of neighbours; steps charged where their "
            "footprints reach)",
            f"  spent (global)   : eps = {self.spent_global:.6g} at delta = "
            f"{self.budget_delta:g} (every step charged to every row)",
            f"  remaining        : eps = {self.remaining:.6g} of {self.budget_epsilon:g}",
        ]
        for i, why in self.unreadable:
            lines.append(f"  UNREADABLE       : release {i}: {why}")
        if self.unreadable:
            lines.append(
                f"  the spend above leaves out {plural(len(self.unreadable), 'release')} "
                "it cannot read: it is a lower bound, and no process can use this ledger "
                "until it is repaired: 'brace ledger repair' (docs/ledger.md, "
                "§7, \"Repairing a ledger\").")
        return "\n".join(lines)


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


def inspect_ledger(path: str | os.PathLike, *, ledger_key: bytes | str | None = None,
                   unreadable: bool = False) -> LedgerState:
    """Read and verify a ledger without its bank (:class:`LedgerState`). With
    ``unreadable``, a release whose chain verifies but whose record cannot be read is
    listed in :attr:`LedgerState.unreadable` (and left out of the spend) instead of
    raised: ``brace ledger show`` names it."""
    db = ledger_class(path).open(path, key=ledger_key, write=False)
    bad: list[tuple[int, str]] | None = [] if unreadable else None
    try:
        with db.read_view():  # the head and the rows of one moment
            db.refresh_meta()
            rows = db._verify_chain(db.raw_rows(), 0, "", bad)
        meta, where = db.meta, str(db.path)  # a URL without its password
    finally:
        db.close()
    stored = len(rows) + len(bad or ())
    try:  # the two-phase record: a completion replaces its pending charge (§4.1)
        rows, pending = settle(rows, unknown=[i for i, _ in bad or ()])
    except _ledger.LedgerError as exc:
        raise _ledger.LedgerError(f"ledger {where}: {exc}") from None
    dim = int(meta["fingerprint"].get("shape", [0, 1])[1])
    index = FootprintIndex(dim)
    if rows:
        index.add(np.concatenate([r.centres for r in rows]),
                  np.concatenate([r.radii for r in rows]),
                  np.concatenate([np.broadcast_to(
                      weights(_ledger.event_from_dict(r.record["event"])),
                      (r.radii.shape[0], K + 1)) for r in rows]))
    b = meta["budget"]
    delta = float(b["delta"])
    return LedgerState(
        where, dict(meta["fingerprint"]), float(b["epsilon"]), delta,
        dict(meta["filter"]), str(meta["created"]), tuple(r.record for r in rows),
        convert(index.worst_pair(), delta), convert(index.global_weights(), delta),
        tuple(bad or ()), tuple(r.id for r in rows), tuple(sorted(pending)), stored)


#: a migrated release is recorded as one footprint (and one output row) per step: at most
#: this many steps × d coordinates per release (2^24: 128 MiB per array), past which
#: migration refuses the release from its public fields instead of running out of memory
MAX_MIGRATED_COORDINATES = 1 << 24


def migrate_json_ledger(source: str | os.PathLike, target: str | os.PathLike, *,
                        ledger_key: bytes | str | None = None) -> LedgerState:
    """Migrate a JSON ledger of the earlier format (``brace-ledger/1``) to a new ledger
    (an SQLite file or a ``postgresql://`` URL): same bank fingerprint and budget; each
    old release is recorded with its event and footprints of infinite radius (it is
    charged to every row, as it was), and can never be a free repeat (its outputs were
    not recorded).

    Every old release is checked before anything is written (its event, and at most
    :data:`MAX_MIGRATED_COORDINATES` steps × d), and the new ledger is built in a
    temporary file (SQLite) or in one transaction (PostgreSQL) published only when
    complete: a failed migration leaves nothing at ``target``."""
    old = read_json_ledger(source)
    b = old["budget"]
    budget = check_budget((b.get("epsilon"), b.get("delta")))
    spec = dataclasses.asdict(FilterSpec.for_budget(*budget))
    spec["orders"] = list(spec["orders"])
    fp = _ledger._check_fingerprint(old["fingerprint"], f"JSON ledger {source}")
    dim = int(fp["shape"][1])
    rows = []
    for i, rec in enumerate(old["releases"], 1):
        if not isinstance(rec, dict):
            raise _ledger.LedgerError(f"JSON ledger {source}: release {i} is not an object.")
        ev = _ledger.event_from_dict(rec.get("event"))
        step, count = (ev.event, ev.count) if isinstance(
            ev, acc_events.SelfComposed) else (ev, 1)
        if isinstance(step, acc_events.SelfComposed | acc_events.Composed):
            raise _ledger.LedgerError(f"JSON ledger {source}: release {i}'s event is not "
                                      "one step, self-composed; it was not migrated.")
        if count * dim > MAX_MIGRATED_COORDINATES:
            raise _ledger.LedgerError(
                f"JSON ledger {source}: release {i} records {count:,} steps in d = {dim}; "
                "migration writes one footprint per step, which is "
                f"{count * dim:,} coordinates, past the limit of "
                f"{MAX_MIGRATED_COORDINATES:,} per release. No ledger of the earlier "
                "version holds such a release within a budget: the file is not a faithful "
                "ledger. Nothing was migrated.")
        new = {k: rec.get(k) for k in ("method", "epsilon", "delta", "params")}
        # one footprint per recorded step, of infinite radius; shaped as ``count``
        # one-step queries (the old outputs were not recorded)
        new.update(queries=int(count), steps=1, dim=dim,
                   release=str((rec.get("params") or {}).get("release", "migrated")),
                   event=_ledger.event_to_dict(step), migrated_from=str(source),
                   privacy={})
        _ledger._check_record(new, f"JSON ledger {source}, release {i}")
        rows.append((i, new, int(count)))

    def fill(db: Ledger) -> None:  # inside the creating transaction
        for i, new, c in rows:
            db.append(call_key=f"migrated:{i}", record=new,
                      outputs=np.zeros((c, 1, dim)), released_counts=None,
                      centres=np.zeros((c, dim)), radii=np.full(c, math.inf))

    # complete before anyone sees it: a temporary file published when filled (SQLite),
    # or the tables and rows in one transaction (PostgreSQL)
    ledger_class(target).create(target, fingerprint=fp, budget=budget, filter_spec=spec,
                                key=ledger_key, fill=fill).close()
    return inspect_ledger(target, ledger_key=ledger_key)


def read_json_ledger(path: str | os.PathLike) -> dict[str, Any]:
    """Read and verify a ledger of the earlier JSON format (``brace-ledger/1``) for
    migration: ``{"fingerprint", "budget", "created", "releases"}``."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"), parse_constant=_reject_constant)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise _ledger.LedgerError(f"cannot read JSON ledger {p}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != JSON_LEDGER_FORMAT:
        raise _ledger.LedgerError(f"{p} is not a JSON ledger ({JSON_LEDGER_FORMAT}).")
    body = {k: v for k, v in doc.items() if k != "checksum"}
    blob = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    if doc.get("checksum") != hashlib.sha256(blob.encode()).hexdigest():
        raise _ledger.LedgerError(f"JSON ledger {p} fails its checksum; it was not migrated.")
    try:
        rel = doc["releases"]
        if not isinstance(rel, list):
            raise _ledger.LedgerError(f"JSON ledger {p}: 'releases' must be a list.")
        return {"fingerprint": dict(doc["fingerprint"]), "budget": dict(doc["budget"]),
                "created": str(doc["created"]), "releases": rel}
    except (KeyError, TypeError) as exc:
        raise _ledger.LedgerError(f"JSON ledger {p} lacks a required field: {exc}.") from None
