"""A ledger's record and its validation: what one release row and the metadata hold,
checked by the same functions when they are written and when they are read
(``docs/ledger.md`` §4, "What a record holds is what a reader reads"): events to and
from JSON, :func:`parse_row` (a release row, as stored, to a :class:`ReleaseRow`),
:func:`check_meta`, the digests of the chain, and the errors every backend raises."""

from __future__ import annotations

import datetime as _dt
import hashlib
import hmac
import json
import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import accounting as acc
from .._validation import check_budget, check_privacy_delta, check_privacy_epsilon

__all__ = [
    "LEDGER_FORMAT", "KEY_ENV", "CELLS_METHOD", "LedgerError", "LedgerLockTimeout",
    "ReleaseRow", "bank_fingerprint", "event_to_dict", "event_from_dict",
    "ledger_key_from_env", "parse_row", "check_meta", "new_meta", "now",
    "PENDING", "COMPLETES", "PENDING_NOTE",
]

LEDGER_FORMAT = "brace-ledger/2"
JSON_LEDGER_FORMAT = "brace-ledger/1"
KEY_ENV = "BRACE_LEDGER_KEY"


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
    params = rec["params"]
    if PENDING in params and (COMPLETES in params or not isinstance(params[PENDING], str)
                              or not params[PENDING]):
        raise LedgerError(f"{where}: a pending charge's params[{PENDING!r}] must be a "
                          f"non-empty string, and it completes nothing.")
    done = params.get(COMPLETES)
    if done is not None and not (isinstance(done, list) and done and all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 1 for i in done)):
        raise LedgerError(f"{where}: params[{COMPLETES!r}] must be a non-empty list of "
                          f"release ids; got {done!r}.")
    return rec


# --------------------------------------------------------------------------------------
# The two-phase record (docs/ledger.md §4.1)
# --------------------------------------------------------------------------------------

#: ``params`` key of a pending charge: appended and committed when a call is admitted,
#: before the bank is read
PENDING = "pending"
#: ``params`` key of a completion row: the ids of the pending rows it replaces
COMPLETES = "completes"
PENDING_NOTE = ("admitted and charged before the bank was read; replaced by its "
                "completion, charged as it is if none follows")


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


def parse_row(row: tuple, where: str) -> ReleaseRow:
    """A release row as stored (id, time, call key, record JSON, the arrays' bytes, MAC)
    parsed and validated: the one check of a row, run by :meth:`Chain.append` on the row
    it is about to write and by every reader. :class:`LedgerError` names ``where``."""
    rid, time, call_key, record, outputs, counts, centres, radii, _ = row
    try:
        rec = json.loads(record, parse_constant=_reject_constant)
    except ValueError as exc:
        raise LedgerError(f"{where}: the record is not valid JSON ({exc}).") from None
    rec = _check_record(rec, where)
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

