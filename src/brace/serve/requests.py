"""The service's requests, declared once as pydantic models: they validate every body
and give ``/openapi.json`` its schemas (:mod:`.openapi`), so the two cannot disagree.

A body is parsed strictly (:func:`parse_json`: UTF-8, standard JSON numbers only; 400
otherwise), then validated by its model (strict types, unknown fields refused, the
ranges the server enforces: ε in ``EPSILON_RANGE``, δ in ``(0, 1)``, vectors of the
bank's dimension ``d``, at most ``--max-queries`` vectors and ``--max-steps`` steps; 422
with one sentence naming the field and echoing the value). The library then checks the
values with its own messages (a :class:`ValueError` there is a 422 too).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import math
import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import annotated_types as at
import numpy as np
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
)
from pydantic_core import PydanticCustomError

from .._validation import PRIVACY_FLOOR
from ..accounting.calibration import EPSILON_RANGE
from ..gates.contract import MAX_COORD
from ..plan import RELEASE_MODES
from ..projection import MAX_DIM as PROJECT_MAX_DIM
from ..synopsis import MAX_SEEDS

__all__ = ["RequestError", "Limits", "RetrieveRequest", "SnapshotRequest",
           "CompleteRequest", "RequestModels", "request_models", "parse_json",
           "check_content_type", "coordinate_limit", "DELTA_MIN", "DOMAIN_MAX", "MAX_ROUNDS"]

#: the smallest δ a ledger records (the one check of the library and the ledger's reader)
DELTA_MIN = PRIVACY_FLOOR
#: the largest coordinate of a public box (the domain range of docs/privacy.md §8)
DOMAIN_MAX = MAX_COORD[np.dtype(np.float64)]
#: the most Voronoi or cell rounds a snapshot may ask of this server (its own cap, below
#: the library's ``seeding.MAX_ROUNDS``)
MAX_ROUNDS = 16
#: a snapshot's cell radius lies in [r / 2^10, r · 2^10], its merge radius in
#: [r / 2^30, DOMAIN_MAX] (the server's stated range; the library checks its own)
CELL_RADIUS_RANGE = 2.0 ** 10
MERGE_RADIUS_MIN = 2.0 ** -30


def _json_integer(v: Any) -> Any:
    """A JSON integer: an integer, or a number with no fractional part (``40.0``, as JSON
    Schema counts it); never a boolean or a string."""
    if isinstance(v, float) and not isinstance(v, bool) and v.is_integer():
        return int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return v


def _int(lo: int, hi: int) -> Any:
    """A JSON integer in ``[lo, hi]`` (the bounds first: so the schema states them)."""
    return Annotated[int, at.Ge(lo), at.Le(hi), BeforeValidator(_json_integer)]


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
    max_header: int = 16 * 1024  # the request line and headers, bytes (431 beyond)
    header_timeout: float = 10.0  # seconds for the request line and headers to arrive
    body_timeout: float = 10.0  # seconds for the body to arrive (408 beyond)


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
# what the routes pass to the service
@dataclass(frozen=True)
class RetrieveRequest:
    queries: np.ndarray
    steps: int
    epsilon: float
    delta: float | None = None
    method: str = "brace"
    release: str | None = None


@dataclass(frozen=True)
class SnapshotRequest:
    kwargs: dict[str, Any] = field(default_factory=dict)
    again: bool = False


@dataclass(frozen=True)
class CompleteRequest:
    queries: np.ndarray
    how: str = "nearest"
    steps: int | None = None


# --------------------------------------------------------------------------------------
class _Body(BaseModel):
    """A request body: strict JSON types (no string for a number, no boolean for an
    integer), finite numbers, no unknown field."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False,
                              json_schema_mode_override="validation")


def _omit_null_default(schema: dict[str, Any]) -> None:
    """Optional fields that must not be null: omitted, never ``null`` (no ``"default":
    null`` in the schema)."""
    for prop in schema.get("properties", {}).values():
        if "default" in prop and prop["default"] is None and "anyOf" not in prop:
            del prop["default"]


def _queries_form(v: Any) -> str:
    """Which form a list of queries has: vectors (a list of lists) or one vector."""
    return "vectors" if isinstance(v, list) and v and isinstance(v[0], list) else "vector"


def _describe(loc: tuple[Any, ...], msg: str, value: Any) -> str:
    where = "".join(f"[{p}]" if isinstance(p, int) else (f"'{p}'" if i == 0 else f".{p}")
                    for i, p in enumerate(loc)) or "the body"
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return f"{where}: {msg[0].lower() + msg[1:]}; got {shown}."


def _invalid(exc: ValidationError, dim: int, model: type[BaseModel]) -> RequestError:
    """One sentence for a :class:`ValidationError`: its first error, naming the field and
    echoing the value (and how many more there are)."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    # the bodies are flat: a string after the field's name is a union member's tag
    loc = tuple(p for i, p in enumerate(first["loc"]) if i == 0 or not isinstance(p, str))
    text = _describe(loc, first["msg"].replace(" after validation", ""),
                     first.get("input"))
    ctx = first.get("ctx") or {}
    bound = {"greater_than_equal": ("ge", "greater than or equal to"),
             "less_than_equal": ("le", "less than or equal to"),
             "greater_than": ("gt", "greater than"),
             "less_than": ("lt", "less than")}.get(first["type"])
    if bound is not None and bound[0] in ctx:  # pydantic writes 1e-300 in full
        text = _describe(loc, f"input should be {bound[1]} {ctx[bound[0]]:.6g}",
                         first.get("input"))
    if (first["type"] in ("too_short", "too_long") and dim in (ctx.get("min_length"),
                                                              ctx.get("max_length"))
            and isinstance(first.get("input"), list)):
        text = _describe(loc, f"must be a vector of length d = {dim} (the bank's "
                         f"dimension), not {len(first['input'])}", first["input"])
    if first.get("input", 0) is None and len(loc) == 1:
        text = f"'{loc[0]}' must not be null: omit it for its default."
    if first["type"] == "missing":
        text = f"missing field '{first['loc'][-1]}'."
    elif first["type"] == "extra_forbidden":
        what = re.split(r"[:.]", " ".join((model.__doc__ or "a body").split()))[0]
        text = (f"unknown field '{first['loc'][-1]}' in {what[0].lower() + what[1:]}; its "
                f"fields are {', '.join(model.model_fields)}.")
    if len(errors) > 1:
        text += f" ({len(errors) - 1} more error(s) in this body.)"
    return RequestError(422, "invalid_request", text)


class RequestModels:
    """The request models of one server: the bank's dimension and the limits are part of
    the schema."""

    def __init__(self, dim: int, limits: Limits, coordinate_max: float = math.inf,
                 radius: float = 1.0) -> None:
        self.dim, self.limits = dim, limits
        lo_eps, hi_eps = EPSILON_RANGE
        Coord = (Annotated[float, Field(description="a finite number")]
                 if coordinate_max == math.inf else
                 Annotated[float, Field(ge=-coordinate_max, le=coordinate_max)])
        Vector = Annotated[list[Coord], Field(min_length=dim, max_length=dim,
                                              description=f"a vector of length d = {dim}")]
        Queries = Annotated[
            Annotated[Annotated[list[Vector], Field(min_length=1,
                                                    max_length=limits.max_queries)],
                      Tag("vectors")] | Annotated[Vector, Tag("vector")],
            Discriminator(_queries_form),
            Field(description=f"a list of at most {limits.max_queries} vectors of length "
                  f"d = {dim} (or one vector)")]
        Epsilon = Annotated[float, Field(ge=lo_eps, le=hi_eps)]
        Delta = Annotated[float, Field(ge=DELTA_MIN, lt=1.0)]
        Steps = _int(1, limits.max_steps)
        Rounds = _int(1, MAX_ROUNDS)
        CellRadius = Annotated[float, Field(ge=radius / CELL_RADIUS_RANGE,
                                            le=radius * CELL_RADIUS_RANGE)]
        MergeRadius = Annotated[float, Field(ge=radius * MERGE_RADIUS_MIN, le=DOMAIN_MAX)]
        BoxEnd = Annotated[float, Field(ge=-DOMAIN_MAX, le=DOMAIN_MAX)]
        BoxVec = Annotated[list[BoxEnd], Field(min_length=dim, max_length=dim)]
        Bounds = Annotated[
            list[BoxEnd | BoxVec], Field(min_length=2, max_length=2),
            Field(description="a public box [lo, hi]: each a number or a vector of length "
                  "d, with lo < hi in every coordinate", examples=[[-4.0, 4.0]])]
        # a private subspace needs 1 <= k < d <= projection.MAX_DIM
        Project = (Literal["auto"] | _int(1, dim - 1) if 2 <= dim <= PROJECT_MAX_DIM
                   else type(None))

        class RetrieveBody(_Body):
            """A private release: ``queries`` (cues), ``steps`` and ``epsilon`` per query;
            ``delta`` per query (default 1% of the budget's), the ``method`` and its
            ``release`` mode."""

            model_config = ConfigDict(json_schema_extra=_omit_null_default)
            queries: Queries
            steps: Steps
            epsilon: Epsilon = Field(description="per-query epsilon")
            delta: Delta | None = Field(None, description="per-query delta (default: 1% "
                                        "of the budget's)")
            method: Literal["brace", "global", "endpoint"] = "brace"
            release: Literal[RELEASE_MODES] | None = Field(  # type: ignore[valid-type]
                None, description="the BRACE release mode (default: the count release "
                "in secure mode)")

        class CompleteBody(_Body):
            """Completions from the published synopsis (free)."""

            model_config = ConfigDict(json_schema_extra=_omit_null_default)
            queries: Queries
            how: Literal["nearest", "lsr"] = "nearest"
            steps: Steps = Field(None, description="lsr: retrieval steps (default: the "
                                 "snapshot's)")  # type: ignore[assignment]

        common = dict(extra="forbid", json_schema_extra=_omit_null_default)

        class _Snapshot(_Body):
            epsilon: Annotated[float, Field(ge=PRIVACY_FLOOR, le=hi_eps)] = Field(
                description="what the synopsis may cost (epsilon at the budget's delta)")
            rounds: Rounds = Field(None)  # type: ignore[assignment]
            merge_radius: MergeRadius = Field(None)  # type: ignore[assignment]
            min_count: Annotated[float, Field(ge=0.0)] = Field(
                None)  # type: ignore[assignment]
            again: bool = Field(False, description="release another synopsis although one "
                                "was released (paid again)")

        class _FromSeeds(_Snapshot):
            steps: _int(0, limits.max_steps) = Field(
                None, description="private retrieval steps per seed first (default 0)"
            )  # type: ignore[assignment]
            method: Literal["brace", "global"] = Field(None)  # type: ignore[assignment]
            release: Literal[RELEASE_MODES] = Field(None)  # type: ignore
            cell_radius: CellRadius = Field(None)  # type: ignore[assignment]
            keep_seeds: bool = False

        class SnapshotFromPoints(_FromSeeds):
            """A synopsis from public seed points."""

            model_config = ConfigDict(**common)
            seeds: Annotated[list[Vector], Field(min_length=1, max_length=MAX_SEEDS)] = \
                Field(description="public seed points (a list of vectors of length d)")

        drawn = Literal["grid"] | _int(1, MAX_SEEDS) \
            if dim <= 3 else _int(1, MAX_SEEDS)

        class SnapshotFromDrawnSeeds(_FromSeeds):
            """A synopsis from seeds drawn in a public box: a count (uniform, public
            draws) or ``"grid"`` (spacing r; d ≤ 3)."""

            model_config = ConfigDict(**common)
            seeds: drawn  # type: ignore[valid-type]
            bounds: Bounds

        class SnapshotWithoutSeeds(_Snapshot):
            """A synopsis without seeds: they are found privately in the public box
            ``bounds``; ``project`` first releases a private top-k subspace."""

            model_config = ConfigDict(**common)
            bounds: Bounds
            project: Project | None = Field(  # type: ignore[valid-type]
                None, description="a private top-k subspace first: k (1 <= k < d) or "
                "'auto'")

        self.retrieve, self.complete = RetrieveBody, CompleteBody
        self.snapshots = (SnapshotFromPoints, SnapshotFromDrawnSeeds, SnapshotWithoutSeeds)

    # ----------------------------------------------------------------------------------
    def _validate(self, model: type[BaseModel], obj: Any) -> BaseModel:
        if not isinstance(obj, dict):
            raise RequestError(422, "invalid_request",
                               f"the body must be a JSON object; got {_kind(obj)}.")
        try:
            return model.model_validate(obj)
        except ValidationError as exc:
            raise _invalid(exc, self.dim, model) from None

    @staticmethod
    def _points(v: list) -> np.ndarray:
        """Validated queries (a list of vectors, or one vector) as ``(Q, d)`` float64."""
        return np.array(v if _queries_form(v) == "vectors" else [v], dtype=np.float64)

    def retrieve_request(self, obj: Any) -> RetrieveRequest:
        m = self._validate(self.retrieve, obj)
        return RetrieveRequest(self._points(m.queries), m.steps, m.epsilon,
                               m.delta, m.method, m.release)

    def complete_request(self, obj: Any) -> CompleteRequest:
        m = self._validate(self.complete, obj)
        return CompleteRequest(self._points(m.queries), m.how, m.steps)

    def snapshot_request(self, obj: Any) -> SnapshotRequest:
        """One of three forms, chosen by ``seeds``: points, a count or ``"grid"`` (with
        ``bounds``), or none (``bounds``: the seeds are found privately)."""
        seeds = obj.get("seeds") if isinstance(obj, dict) else None
        points, drawn, none = self.snapshots
        model = (none if not isinstance(obj, dict) or "seeds" not in obj
                 else points if isinstance(seeds, list) else drawn)
        if model is none and isinstance(obj, dict) and "bounds" not in obj:
            raise RequestError(422, "invalid_request", "a snapshot needs public 'seeds' "
                               "(points, or a count or \"grid\" with 'bounds') or a public "
                               "box 'bounds' to find its seeds in privately.")
        m = self._validate(model, obj)
        kw: dict[str, Any] = {k: v for k, v in m.model_dump(exclude_unset=True).items()
                              if k != "again" and v is not None}
        if model is points:
            kw["seeds"] = np.array(m.seeds, dtype=np.float64)
        if "bounds" in kw:
            kw["bounds"] = tuple(kw["bounds"])
        return SnapshotRequest(kw, m.again)


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


@functools.lru_cache(maxsize=8)
def request_models(dim: int, limits: Limits = Limits(),  # noqa: B008
                   coordinate_max: float = math.inf, radius: float = 1.0) -> RequestModels:
    """The request models of a server on a bank of dimension ``dim`` and radius
    ``radius`` whose queries' coordinates lie in ``[-coordinate_max, coordinate_max]``."""
    return RequestModels(dim, limits, coordinate_max, radius)


@functools.lru_cache(maxsize=8)
def coordinate_limit(n: int, dim: int, radius: float, max_steps: int) -> float:
    """The largest ``r·2^k`` such that a query with every coordinate of that size passes
    the library's public floating-point checks (:func:`brace.steps.public_checks`:
    ``docs/privacy.md`` §8) in every plan a request may make — every method and release,
    ε at the top of ``EPSILON_RANGE`` and δ at both ends (the finest grid), ``max_steps``
    steps (the farthest reach) — or 0. Public values only; the schema states it."""
    from ..plan import plan_release
    from ..steps import public_checks

    plans = []
    for method, release, delta in itertools.product(
            ("brace", "global", "endpoint"), (None, *RELEASE_MODES), (DELTA_MIN, 1 - 2**-53)):
        if release is None or method == "brace":
            with contextlib.suppress(ValueError):  # a plan the library refuses anyway
                plans.append(plan_release((n, dim), radius=radius, method=method,
                                          epsilon=EPSILON_RANGE[1], delta=delta,
                                          steps=max_steps, release=release, noise="secure"))

    def passes(k: int) -> bool:
        q = np.full((1, dim), radius * 2.0**k)
        try:
            for plan in plans:
                public_checks(plan, q)
        except ValueError:
            return False
        return True

    lo, hi = -200, 400  # passes(lo), not passes(hi)
    if not plans or not passes(lo):
        return 0.0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if passes(mid) else (lo, mid)
    return radius * 2.0**lo
