"""Strict parsing of the service's JSON requests: every malformed body is a
:class:`RequestError` with a status (400, 413, 415, 422) and one clear sentence, never a
traceback. Numbers must be JSON numbers (``NaN``, ``Infinity`` and numbers that
overflow a double are refused), fields are checked by name and type, unknown fields are
refused; the library then checks the values (dimension, ε > 0, …) with its own
messages."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["RequestError", "Limits", "RetrieveRequest", "SnapshotRequest",
           "CompleteRequest", "parse_json", "check_content_type", "retrieve_request",
           "snapshot_request", "complete_request"]


class RequestError(ValueError):
    """A request the service refuses before doing anything: ``status`` and ``kind``
    (a short code) for the response, the message for the caller."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


@dataclass(frozen=True)
class Limits:
    """What one request may ask for (``brace serve`` options)."""

    max_body: int = 1 << 20
    max_queries: int = 256
    max_steps: int = 64


def check_content_type(value: str | None) -> None:
    media = (value or "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise RequestError(415, "unsupported_media_type",
                           f"the body must be JSON with Content-Type: application/json; got "
                           f"{(value or 'none')[:80]!r}.")


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(f"the number {text[:40]} overflows a double")
    return v


def parse_json(body: bytes) -> Any:
    """The JSON value of ``body`` (UTF-8, standard numbers only); 400 otherwise."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise RequestError(400, "invalid_json", "the body is not UTF-8 text.") from None
    try:
        return json.loads(text, parse_constant=_constant, parse_float=_float)
    except RecursionError:
        raise RequestError(400, "invalid_json", "the body nests too deeply.") from None
    except ValueError as exc:  # JSONDecodeError, a refused constant, a huge integer
        raise RequestError(400, "invalid_json", f"the body is not valid JSON: {exc}."
                           ) from None


# --------------------------------------------------------------------------------------
def _invalid(message: str) -> RequestError:
    return RequestError(422, "invalid_request", message)


def _fields(obj: Any, required: tuple[str, ...], optional: tuple[str, ...]) -> dict:
    if not isinstance(obj, dict):
        raise _invalid(f"the body must be a JSON object; got {_kind(obj)}.")
    unknown = sorted(set(obj) - set(required) - set(optional))
    if unknown:
        raise _invalid(f"unknown field(s) {', '.join(map(repr, unknown))}; the fields are "
                       f"{', '.join(required + optional)}.")
    missing = [k for k in required if k not in obj]
    if missing:
        raise _invalid(f"missing field(s) {', '.join(map(repr, missing))}.")
    return obj


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, int | float):
        return "a number"
    if isinstance(v, list):
        return "a list"
    return "an object"


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _number(obj: dict, name: str, *, optional: bool = False) -> float | None:
    v = obj.get(name)
    if v is None and optional:
        return None
    if not _is_number(v):
        raise _invalid(f"{name!r} must be a number; got {_kind(v)}.")
    try:
        return float(v)
    except OverflowError:
        raise _invalid(f"{name!r} is out of range.") from None


def _integer(obj: dict, name: str, lo: int, hi: int, *, optional: bool = False
             ) -> int | None:
    v = obj.get(name)
    if v is None and optional:
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if not isinstance(v, int) or isinstance(v, bool):
        raise _invalid(f"{name!r} must be an integer; got {_kind(v)}.")
    if not lo <= v <= hi:
        raise _invalid(f"{name!r} must be in [{lo}, {hi}]; got {v}.")
    return v


def _string(obj: dict, name: str, choices: tuple[str, ...] | None = None
            ) -> str | None:
    v = obj.get(name)
    if v is None:
        return None
    if not isinstance(v, str):
        raise _invalid(f"{name!r} must be a string; got {_kind(v)}.")
    if choices is not None and v not in choices:
        raise _invalid(f"{name!r} must be one of {', '.join(choices)}; got {v[:40]!r}.")
    return v


def _bool(obj: dict, name: str) -> bool:
    v = obj.get(name, False)
    if not isinstance(v, bool):
        raise _invalid(f"{name!r} must be true or false; got {_kind(v)}.")
    return v


def _points(v: Any, name: str, max_rows: int) -> np.ndarray:
    """A list of vectors (or one vector) of JSON numbers, as float64 ``(Q, d)``."""
    if not isinstance(v, list) or not v:
        raise _invalid(f"{name!r} must be a non-empty list of vectors (lists of numbers); "
                       f"got {_kind(v) if v != [] else 'an empty list'}.")
    rows = v if isinstance(v[0], list) else [v]
    if len(rows) > max_rows:
        raise _invalid(f"{name!r} holds {len(rows)} vectors; at most {max_rows} per "
                       "request.")
    width = None
    for i, row in enumerate(rows):
        if not isinstance(row, list) or not row:
            raise _invalid(f"{name!r}[{i}] must be a non-empty list of numbers; got "
                           f"{_kind(row)}.")
        for j, x in enumerate(row):
            if not _is_number(x):
                raise _invalid(f"{name!r}[{i}][{j}] must be a number; got {_kind(x)}.")
        if width is None:
            width = len(row)
        elif len(row) != width:
            raise _invalid(f"{name!r}: the vectors have different lengths ({width} and "
                           f"{len(row)} at [{i}]).")
    try:
        return np.array(rows, dtype=np.float64)
    except OverflowError:
        raise _invalid(f"{name!r} holds a number out of range.") from None


# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RetrieveRequest:
    queries: np.ndarray
    steps: int
    epsilon: float
    delta: float | None = None
    method: str = "brace"
    release: str | None = None


RETRIEVE_FIELDS = (("queries", "steps", "epsilon"), ("delta", "method", "release"))


def retrieve_request(obj: Any, limits: Limits) -> RetrieveRequest:
    body = _fields(obj, *RETRIEVE_FIELDS)
    return RetrieveRequest(
        queries=_points(body["queries"], "queries", limits.max_queries),
        steps=_integer(body, "steps", 1, limits.max_steps),
        epsilon=_number(body, "epsilon"),
        delta=_number(body, "delta", optional=True),
        method=_string(body, "method") or "brace",
        release=_string(body, "release"),
    )


@dataclass(frozen=True)
class SnapshotRequest:
    kwargs: dict[str, Any] = field(default_factory=dict)
    again: bool = False


SNAPSHOT_FIELDS = (("epsilon",), ("seeds", "bounds", "steps", "rounds", "method",
                                  "release", "cell_radius", "merge_radius", "min_count",
                                  "keep_seeds", "project", "again"))
MAX_SNAPSHOT_SEEDS = 4096


def snapshot_request(obj: Any, limits: Limits) -> SnapshotRequest:
    """``epsilon`` (required: what the synopsis may cost), public ``seeds`` (points,
    a count or ``"grid"``), ``bounds`` (forwarded as given) and the snapshot's options."""
    body = _fields(obj, *SNAPSHOT_FIELDS)
    kw: dict[str, Any] = {"epsilon": _number(body, "epsilon")}
    if "seeds" in body:
        s = body["seeds"]
        if isinstance(s, str) or (isinstance(s, int) and not isinstance(s, bool)):
            kw["seeds"] = s
        else:
            kw["seeds"] = _points(s, "seeds", MAX_SNAPSHOT_SEEDS)
    if "bounds" in body:
        kw["bounds"] = body["bounds"]
    for name, hi in (("steps", limits.max_steps), ("rounds", 16)):
        if name in body:
            kw[name] = _integer(body, name, 0 if name == "steps" else 1, hi)
    for name in ("cell_radius", "merge_radius", "min_count"):
        if body.get(name) is not None:
            kw[name] = _number(body, name)
    if body.get("method") is not None:
        kw["method"] = _string(body, "method")
    if body.get("release") is not None:
        kw["release"] = _string(body, "release")
    if "keep_seeds" in body:
        kw["keep_seeds"] = _bool(body, "keep_seeds")
    if body.get("project") is not None:  # a private subspace first (checked by snapshot)
        v = body["project"]
        if not (v == "auto" or (isinstance(v, int) and not isinstance(v, bool))):
            raise _invalid("project must be \"auto\" or an integer k (1 <= k < d).")
        kw["project"] = v
    return SnapshotRequest(kw, _bool(body, "again"))


@dataclass(frozen=True)
class CompleteRequest:
    queries: np.ndarray
    how: str = "nearest"
    steps: int | None = None


COMPLETE_FIELDS = (("queries",), ("how", "steps"))


def complete_request(obj: Any, limits: Limits) -> CompleteRequest:
    body = _fields(obj, *COMPLETE_FIELDS)
    return CompleteRequest(_points(body["queries"], "queries", limits.max_queries),
                           _string(body, "how", ("nearest", "lsr")) or "nearest",
                           _integer(body, "steps", 1, limits.max_steps, optional=True))
