"""A persistent privacy ledger: every release from one bank, on disk, write-ahead.

The ledger is one JSON file (``docs/ledger.md``). It holds the bank's fingerprint, the
budget and one record per release; each record carries the release's privacy *events*
(per-step ρ, γ, dimension and count), so the total is recomposed from the events on
every load (:func:`compose_records`) rather than trusted from a stored sum. The bank
itself is never stored.

* **Write-ahead.** :class:`brace.PrivateMemory` appends the record, writes the file
  atomically (temporary file, ``fsync``, ``os.replace``, ``fsync`` of the directory) and
  only then returns the release. A process killed at any point leaves the old ledger or
  the new one, never a half-written file and never a returned release unrecorded.
* **Serialised.** Every read-check-append happens under a :class:`filelock.FileLock`
  on ``<ledger>.lock``, so two processes cannot both spend the last of the budget.
* **Bound to its bank.** The fingerprint is the SHA-256 of the bank's bytes, shape,
  dtype and radius (:func:`bank_fingerprint`); opening a ledger with another
  bank, radius or budget is an error.
* **Checked.** A checksum over the content detects corruption; a truncated, corrupt or
  foreign file is a :class:`LedgerError`, never a silent reset.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import hashlib
import json
import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import accounting as acc
from ._io import atomic_write_bytes

__all__ = [
    "LEDGER_FORMAT",
    "LedgerError",
    "LedgerState",
    "bank_fingerprint",
    "event_to_dict",
    "event_from_dict",
    "compose_records",
    "read_ledger",
    "create_ledger",
    "write_ledger",
    "ledger_lock",
]

LEDGER_FORMAT = "brace-ledger/1"


class LedgerError(ValueError):
    """A ledger file that cannot be trusted: corrupt, truncated, foreign or mismatched."""


def bank_fingerprint(bank: Any, radius: float) -> dict[str, Any]:
    """SHA-256 of the bank's bytes (in its own dtype, float32 or float64, C order), its
    shape, dtype and radius (:func:`brace._fingerprint.bank_fingerprint`; the radius
    enters as its exact ``float.hex``, so radii one ulp apart differ). Memory maps are
    streamed in blocks, never copied whole."""
    from ._fingerprint import bank_fingerprint as _digest

    if not hasattr(bank, "shape") or not hasattr(bank, "dtype"):
        bank = np.asarray(bank)
    return {
        "sha256": _digest(bank, radius),
        "shape": [int(s) for s in bank.shape],
        "dtype": str(np.dtype(bank.dtype)),
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


def event_from_dict(data: Any) -> acc.DpEvent:
    """The event described by :func:`event_to_dict`'s output; a clear error otherwise."""
    if not isinstance(data, dict) or "type" not in data:
        raise LedgerError(f"ledger event must be an object with a 'type'; got {data!r}.")
    kind = data["type"]
    try:
        if kind == "GaussianStep":
            return acc.GaussianStep(_num(data["rho"]))
        if kind == "SmoothGaussianStep":
            return acc.SmoothGaussianStep(_num(data["rho"]), _num(data["gamma"]),
                                          int(data["dim"]))
        if kind == "CountedGaussianStep":
            return acc.CountedGaussianStep(_num(data["rho"]), _num(data["eps_count"]),
                                           _num(data["delta_count"]))
        if kind == "SelfComposed":
            return acc.SelfComposed(event_from_dict(data["event"]), int(data["count"]))
        if kind == "Composed":
            return acc.Composed(tuple(event_from_dict(e) for e in data["events"]))
        if kind == "NonPrivateEvent":
            return acc.NonPrivateEvent(str(data.get("reason", "")))
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, LedgerError):
            raise
        raise LedgerError(f"malformed ledger event {data!r}: {exc}") from None
    raise LedgerError(f"unknown ledger event type {kind!r}.")


def _num(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise LedgerError(f"ledger number must be finite; got {v!r}.")
    return float(v)


def compose_records(
    records: Sequence[dict[str, Any]], delta: float, extra: Sequence[dict[str, Any]] = ()
) -> tuple[float, acc.RdpAccountant, float]:
    """Compose every record's events in one RDP accountant and convert once.

    Returns ``(epsilon, accountant, delta_extra)``: the per-order RDP curves of all
    events are summed; the records' non-RDP ``delta_extra`` parts add up as δ; the
    curve is converted at ``delta − delta_extra`` (ε = ∞ if nothing of δ is left).
    ``extra`` are records not yet written (a call being priced).
    """
    accountant = acc.RdpAccountant()
    delta_extra = 0.0
    for rec in (*records, *extra):
        accountant.compose(event_from_dict(rec["event"]))
        delta_extra += float(rec.get("delta_extra", 0.0))
    left = delta - delta_extra
    if not left > 0.0:
        return math.inf, accountant, delta_extra
    return accountant.get_epsilon(left), accountant, delta_extra


# --------------------------------------------------------------------------------------
# The file
# --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LedgerState:
    """A ledger as read from disk: fingerprint, budget, releases and their composition.

    ``spent`` is recomposed from the recorded events at the budget's δ (never read from
    the file); ``remaining = max(0, budget_epsilon − spent)``.
    """

    path: str
    fingerprint: dict[str, Any]
    budget_epsilon: float
    budget_delta: float
    releases: tuple[dict[str, Any], ...]
    created: str
    spent: float
    delta_extra: float

    @property
    def remaining(self) -> float:
        return max(0.0, self.budget_epsilon - self.spent)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "fingerprint": dict(self.fingerprint),
            "budget": {"epsilon": self.budget_epsilon, "delta": self.budget_delta},
            "created": self.created,
            "releases": [dict(r) for r in self.releases],
            "spent_epsilon": _finite_or_none(self.spent),
            "remaining_epsilon": self.remaining,
            "at_delta": self.budget_delta,
            "delta_extra": self.delta_extra,
        }

    def summary(self) -> str:
        fp = self.fingerprint
        lines = [
            f"ledger {self.path}",
            f"  bank fingerprint : sha256 {fp['sha256']}",
            f"                     shape {tuple(fp['shape'])}, dtype {fp['dtype']}, "
            f"radius {fp['radius']:g}",
            f"  budget           : ({self.budget_epsilon:g}, {self.budget_delta:g})-DP",
            f"  releases         : {len(self.releases)}",
        ]
        for i, r in enumerate(self.releases, 1):
            lines.append(
                f"    {i:>4}. {r['time']}  method={r['method']}  queries={r['queries']}  "
                f"steps={r['steps']}  per query ({r['epsilon']:g}, {r['delta']:g})  "
                f"total after: eps = {r['spent_after']:.6g}"
            )
        lines += [
            f"  spent            : eps = {self.spent:.6g} at delta = {self.budget_delta:g}"
            " (RDP composed over all releases, queries and steps; one conversion)",
            f"  remaining        : eps = {self.remaining:.6g} of {self.budget_epsilon:g}",
        ]
        return "\n".join(lines)


def _finite_or_none(v: float) -> float | None:
    return v if math.isfinite(v) else None


def _checksum(body: dict[str, Any]) -> str:
    blob = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def _reject_constant(name: str) -> float:
    raise LedgerError(f"ledger holds the non-JSON number {name}.")


def read_ledger(path: str | os.PathLike) -> LedgerState:
    """Read and verify a ledger; :class:`LedgerError` if it is not a valid one."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"ledger file not found: {p}")
    raw = p.read_bytes()
    try:
        doc = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LedgerError(
            f"ledger {p} is corrupt or truncated ({exc}); it was not changed. Restore it "
            "from a backup: a ledger is never reset silently."
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != LEDGER_FORMAT:
        raise LedgerError(
            f"{p} is not a brace ledger (expected format {LEDGER_FORMAT!r}; found "
            f"{doc.get('format') if isinstance(doc, dict) else type(doc).__name__!r})."
        )
    body = {k: v for k, v in doc.items() if k != "checksum"}
    if doc.get("checksum") != _checksum(body):
        raise LedgerError(
            f"ledger {p} fails its checksum: it was edited or damaged. It was not changed; "
            "restore it from a backup."
        )
    try:
        budget = doc["budget"]
        b_eps, b_delta = _num(budget["epsilon"]), _num(budget["delta"])
        releases = tuple(doc["releases"])
        fp = dict(doc["fingerprint"])
        created = str(doc["created"])
    except (KeyError, TypeError) as exc:
        raise LedgerError(f"ledger {p} lacks a required field: {exc}.") from None
    spent, _, delta_extra = compose_records(releases, b_delta)
    return LedgerState(str(p), fp, b_eps, b_delta, releases, created, spent, delta_extra)


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not every platform can open a directory
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_ledger(
    path: str | os.PathLike,
    fingerprint: dict[str, Any],
    budget: tuple[float, float],
    releases: Sequence[dict[str, Any]],
    created: str,
) -> None:
    """Atomically and durably write the ledger (temp file + fsync + replace + dir fsync)."""
    from ._version import __version__

    body = {
        "format": LEDGER_FORMAT,
        "brace_version": __version__,
        "created": created,
        "fingerprint": fingerprint,
        "budget": {"epsilon": float(budget[0]), "delta": float(budget[1])},
        "releases": list(releases),
    }
    doc = {**body, "checksum": _checksum(body)}
    p = Path(path)
    atomic_write_bytes(p, (json.dumps(doc, indent=1, allow_nan=False) + "\n").encode())
    _fsync_dir(p.parent if str(p.parent) else Path("."))


def create_ledger(
    path: str | os.PathLike, fingerprint: dict[str, Any], budget: tuple[float, float]
) -> None:
    """Write an empty ledger (no releases) for this bank and budget."""
    write_ledger(path, fingerprint, budget, [], now())


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds")


@contextlib.contextmanager
def ledger_lock(path: str | os.PathLike, timeout: float = -1) -> Iterator[None]:
    """Hold the ledger's inter-process lock (``<path>.lock``); ``timeout`` in seconds,
    −1 waits as long as it takes."""
    from filelock import FileLock, Timeout

    lock = FileLock(f"{os.fspath(path)}.lock", timeout=timeout)
    try:
        lock.acquire()
    except Timeout:
        raise TimeoutError(
            f"could not lock ledger {path} within {timeout} s: another process holds it."
        ) from None
    try:
        yield
    finally:
        lock.release()


def check_binding(
    state: LedgerState, fingerprint: dict[str, Any], budget: tuple[float, float]
) -> None:
    """A ledger opened with another bank (or radius) or another budget is an error."""
    if state.fingerprint.get("sha256") != fingerprint["sha256"]:
        fp = state.fingerprint
        raise LedgerError(
            f"ledger {state.path} belongs to another bank: its fingerprint is "
            f"{fp.get('sha256')} (shape {fp.get('shape')}, radius {fp.get('radius')}), this "
            f"bank's is {fingerprint['sha256']} (shape {fingerprint['shape']}, radius "
            f"{fingerprint['radius']}). Use the ledger of this bank, or a new ledger file."
        )
    if (state.budget_epsilon, state.budget_delta) != (float(budget[0]), float(budget[1])):
        raise LedgerError(
            f"ledger {state.path} was created with budget ({state.budget_epsilon:g}, "
            f"{state.budget_delta:g}); it was opened with ({budget[0]:g}, {budget[1]:g}). "
            "A ledger's budget is fixed when it is created."
        )
