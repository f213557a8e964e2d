"""The service's routes and responses, declared once: :data:`ROUTES` and the pydantic
models below give :mod:`.app` its routing and ``/openapi.json`` (OpenAPI 3.1) its
document; the request bodies are the models of :mod:`.requests`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import models_json_schema

from .._version import __version__
from .requests import Limits, request_models

__all__ = ["ROUTES", "RouteSpec", "openapi_document"]


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


class Error(_Out):
    """Every refusal or failure: a short code and one clear sentence."""

    error: str = Field(description="a short code")
    message: str = Field(description="one clear sentence")


class BudgetRefused(Error):
    """409: the budget refuses the call; nothing was released or spent."""

    spent: float | None = None
    remaining: float | None = None
    reason: str | None = None
    affordable_epsilon: float | None = None


class Budget(_Out):
    """What is spent and left (epsilon at the budget's delta)."""

    spent: float | None = Field(description="null when it cannot be stated finitely")
    remaining: float
    epsilon: float
    delta: float
    releases: int = Field(description="releases recorded")


class Release(_Out):
    """A private release, recorded in the ledger before it is returned."""

    method: str
    outputs: list[Any] = Field(description="(Q, T, d) released trajectories (endpoint: "
                               "T = 1); every coordinate a multiple of its grid unit")
    released_counts: list[Any] | None = Field(None, description="(Q, T) noisy gate counts "
                                              "(count release)")
    grid: list[Any] | None = Field(None, description="(Q, T) public grid unit of each step")
    privacy: dict[str, Any] = Field(description="the release's privacy record")
    params: dict[str, Any] = Field(description="public parameters (no seed: there is none)")
    release_id: int = Field(description="its number in the ledger")
    repeat: bool = Field(description="true: an identical call was recorded before and is "
                         "returned again, free")


class Synopsis(_Out):
    """The published synopsis: attractors, noisy counts, public seeds and parameters,
    its cost."""


class Completions(_Out):
    """Completions from the published synopsis: post-processing, free."""

    completions: list[list[float]] = Field(description="(Q, d)")
    how: Literal["nearest", "lsr"]
    epsilon: float = Field(description="0: free")
    note: str


class Health(_Out):
    """Liveness, and whether the ledger answers and reads back."""

    status: Literal["ok", "unavailable"]
    ledger: str = Field(description="'ok', or what is wrong")


_MODELS = (Error, BudgetRefused, Budget, Release, Synopsis, Completions, Health)


@dataclass(frozen=True)
class RouteSpec:
    """One route: its path, method, name (the handler), who may call it (``None``: no
    key, ``"analyst"``: any key, ``"admin"``), its body (a key of
    :class:`~.requests.RequestModels`) and its responses (status: description, model)."""

    path: str
    method: str
    name: str
    summary: str
    who: str | None
    body: str | None
    responses: dict[int, tuple[str, type[BaseModel] | None]]


_KEY = {401: ("no bearer token, or an unknown one", Error)}
_LEDGER = {503: ("the ledger is unavailable, busy or cannot be used: nothing was "
                 "released; retry (Retry-After) or the operator must act", Error)}
_BODY = {
    400: ("the body is not valid JSON (NaN and Infinity are not JSON)", Error),
    408: ("the body did not arrive within the server's time-out", Error),
    413: ("the body is larger than the server's limit", Error),
    415: ("the body is not Content-Type: application/json", Error),
    422: ("a field is missing, unknown, of the wrong type or out of range, or the library "
          "refuses a value; the message says which", Error),
}
_NONE = {404: ("no synopsis published yet", Error)}

ROUTES: tuple[RouteSpec, ...] = (
    RouteSpec("/v1/retrieve", "POST", "retrieve", "a private release (analyst or admin)",
              "analyst", "retrieve", {
                  200: ("the release, recorded", Release),
                  409: ("the budget refuses the call: nothing was released or spent",
                        BudgetRefused), **_KEY, **_BODY, **_LEDGER}),
    RouteSpec("/v1/budget", "GET", "budget", "what is spent and left", "analyst", None,
              {200: ("the budget", Budget), **_KEY, **_LEDGER}),
    RouteSpec("/v1/snapshot", "POST", "snapshot", "release a synopsis once (admin)",
              "admin", "snapshot", {
                  200: ("the synopsis, published", Synopsis),
                  403: ("an analyst key on an admin route", Error),
                  409: ("the budget refuses it (nothing was released or spent), or a "
                        "synopsis was already released", BudgetRefused),
                  **_KEY, **_BODY,
                  503: ("the ledger is unavailable or busy: nothing was released; retry "
                        "(Retry-After). Or not_published: the synopsis was released and "
                        "charged but could not be published", Error)}),
    RouteSpec("/v1/synopsis", "GET", "synopsis", "the published synopsis (free)",
              "analyst", None, {200: ("the synopsis", Synopsis), **_NONE, **_KEY,
                                **_LEDGER}),
    RouteSpec("/v1/complete", "POST", "complete", "complete queries from the synopsis "
              "(free)", "analyst", "complete", {
                  200: ("completions", Completions), **_NONE, **_KEY, **_BODY,
                  **_LEDGER}),
    RouteSpec("/healthz", "GET", "healthz", "liveness and whether the ledger answers "
              "(no key)", None, None, {200: ("up, the ledger answers", Health),
                                       503: ("the ledger does not answer or cannot be "
                                             "read", Health)}),
    RouteSpec("/openapi.json", "GET", "openapi", "this document (no key)", None, None,
              {200: ("OpenAPI 3.1", None)}),
)

_HEAD = {431: ("the request line and headers are larger than the server's limit", Error)}


def openapi_document(dim: int, limits: Limits = Limits(),  # noqa: B008
                     coordinate_max: float = float("inf"), radius: float = 1.0
                     ) -> dict[str, Any]:
    """The OpenAPI 3.1 document of a server on a bank of dimension ``dim``."""
    req = request_models(dim, limits, coordinate_max, radius)
    bodies = {"retrieve": [req.retrieve], "complete": [req.complete],
              "snapshot": list(req.snapshots)}
    models = [*_MODELS, *(m for ms in bodies.values() for m in ms)]
    refs, defs = models_json_schema([(m, "validation") for m in models],
                                    ref_template="#/components/schemas/{model}")
    ref = {m: refs[(m, "validation")] for m in models}

    def content(model: type[BaseModel] | None) -> dict[str, Any]:
        schema = ref[model] if model is not None else {"type": "object"}
        return {"content": {"application/json": {"schema": schema}}}

    paths: dict[str, Any] = {}
    for r in ROUTES:
        op: dict[str, Any] = {"operationId": r.name, "summary": r.summary}
        if r.who is not None:
            op["security"] = [{"bearer": []}]
        if r.body is not None:
            forms = [ref[m] for m in bodies[r.body]]
            op["requestBody"] = {"required": True, "content": {"application/json": {
                "schema": forms[0] if len(forms) == 1 else {"oneOf": forms}}}}
        op["responses"] = {str(s): {"description": d, **content(m)}
                           for s, (d, m) in sorted({**r.responses, **_HEAD}.items())}
        paths.setdefault(r.path, {})[r.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "brace serve: private retrieval from a dense associative memory",
                 "version": __version__,
                 "description": "Every release is (epsilon, delta)-differentially private "
                 "for each stored memory, admitted by the bank's one budget and recorded in "
                 f"its ledger before it is returned (docs/deploying.md). The bank has d = "
                 f"{dim}."},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
                       "schemas": defs.get("$defs", {})},
        "paths": paths,
    }
