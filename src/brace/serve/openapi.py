"""The OpenAPI 3.1 document of ``brace serve`` (served at ``/openapi.json``)."""

from __future__ import annotations

from typing import Any

from .._version import __version__
from .requests import Limits

__all__ = ["openapi_document"]

_VECTORS = {"type": "array", "minItems": 1,
            "items": {"type": "array", "minItems": 1, "items": {"type": "number"}},
            "description": "a list of vectors of length d (or one vector)"}


def _error(description: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    props = {"error": {"type": "string", "description": "a short code"},
             "message": {"type": "string", "description": "one clear sentence"},
             **(extra or {})}
    return {"description": description, "content": {"application/json": {"schema": {
        "type": "object", "required": ["error", "message"], "properties": props}}}}


def _ok(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": schema}}}


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def openapi_document(limits: Limits = Limits()) -> dict[str, Any]:  # noqa: B008
    auth = [{"bearer": []}]
    common = {
        "400": _error("the body is not valid JSON (NaN and Infinity are not JSON)"),
        "401": _error("no bearer token, or an unknown one"),
        "413": _error(f"the body is larger than the server's limit "
                      f"({limits.max_body} bytes by default)"),
        "415": _error("the body is not Content-Type: application/json"),
        "422": _error("a field is missing, unknown, of the wrong type or out of range; "
                      "the message says which"),
        "503": _error("the ledger is unavailable or busy: nothing was released; retry "
                      "(Retry-After)"),
    }
    budget = {"type": "object", "required": ["spent", "remaining", "epsilon", "delta",
                                             "releases"],
              "properties": {"spent": {"type": ["number", "null"]},
                             "remaining": {"type": "number"},
                             "epsilon": {"type": "number"}, "delta": {"type": "number"},
                             "releases": {"type": "integer",
                                          "description": "releases recorded"}}}
    retrieve_in = {
        "type": "object", "additionalProperties": False,
        "required": ["queries", "steps", "epsilon"],
        "properties": {
            "queries": {**_VECTORS, "maxItems": limits.max_queries},
            "steps": {"type": "integer", "minimum": 1, "maximum": limits.max_steps},
            "epsilon": {"type": "number", "exclusiveMinimum": 0,
                        "description": "per-query epsilon"},
            "delta": {"type": ["number", "null"],
                      "description": "per-query delta (default 1% of the budget's)"},
            "method": {"type": "string", "enum": ["brace", "global", "endpoint"],
                       "default": "brace"},
            "release": {"type": ["string", "null"],
                        "description": "the release mode (default: the count release for "
                        "brace in secure mode)"},
        }}
    retrieve_out = {
        "type": "object",
        "required": ["method", "outputs", "privacy", "params", "release_id", "repeat"],
        "properties": {
            "method": {"type": "string"},
            "outputs": {"type": "array", "description": "(Q, T, d) released trajectories "
                        "(endpoint: T = 1); every coordinate a multiple of its grid unit"},
            "released_counts": {"type": "array", "description": "(Q, T) noisy gate counts "
                                "(count release)"},
            "grid": {"type": "array", "description": "(Q, T) public grid unit of each step"},
            "privacy": {"type": "object", "description": "the release's privacy record"},
            "params": {"type": "object", "description": "public parameters (no seed: "
                       "there is none)"},
            "release_id": {"type": "integer", "description": "its number in the ledger"},
            "repeat": {"type": "boolean", "description": "true: an identical call was "
                       "recorded before and is returned again, free"},
        }}
    snapshot_in = {
        "type": "object", "additionalProperties": False, "required": ["epsilon"],
        "properties": {
            "epsilon": {"type": "number", "exclusiveMinimum": 0,
                        "description": "what the synopsis may cost (epsilon at the "
                        "budget's delta)"},
            "seeds": {"description": "public seeds: points (list of vectors), a count, or "
                      "'grid'"},
            "bounds": {"description": "a public box (lo, hi), forwarded as given"},
            "steps": {"type": "integer", "minimum": 0},
            "rounds": {"type": "integer", "minimum": 1},
            "method": {"type": "string", "enum": ["brace", "global"]},
            "release": {"type": "string"},
            "cell_radius": {"type": "number"}, "merge_radius": {"type": "number"},
            "min_count": {"type": "number"}, "keep_seeds": {"type": "boolean"},
            "project": {"anyOf": [{"type": "integer", "minimum": 1}, {"const": "auto"},
                                  {"type": "null"}],
                        "description": "without seeds: first a private top-k subspace, "
                        "k an integer (1 <= k < d) or 'auto'"},
            "again": {"type": "boolean", "default": False,
                      "description": "release another synopsis although one was "
                      "released (paid again)"},
        }}
    synopsis = {"type": "object", "description": "the published synopsis (attractors, "
                "noisy counts, public seeds and parameters, its cost)"}
    complete_in = {"type": "object", "additionalProperties": False, "required": ["queries"],
                   "properties": {"queries": {**_VECTORS, "maxItems": limits.max_queries},
                                  "how": {"type": "string", "enum": ["nearest", "lsr"]},
                                  "steps": {"type": "integer", "minimum": 1}}}
    complete_out = {"type": "object", "properties": {
        "completions": {"type": "array", "description": "(Q, d)"},
        "how": {"type": "string"}, "epsilon": {"type": "number", "const": 0}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "brace serve: private retrieval from a dense associative memory",
                 "version": __version__,
                 "description": "Every release is (epsilon, delta)-differentially private "
                 "for each stored memory, admitted by the bank's one budget and recorded in "
                 "its ledger before it is returned (docs/deploying.md)."},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "paths": {
            "/v1/retrieve": {"post": {
                "summary": "a private release (analyst or admin)", "security": auth,
                "requestBody": _body(retrieve_in),
                "responses": {"200": _ok("the release, recorded", retrieve_out),
                              "409": _error("the budget refuses the call: nothing was "
                                            "released or spent", {
                                                "spent": {"type": "number"},
                                                "remaining": {"type": "number"},
                                                "reason": {"type": "string"},
                                                "affordable_epsilon": {"type": "number"}}),
                              **common}}},
            "/v1/budget": {"get": {
                "summary": "what is spent and left", "security": auth,
                "responses": {"200": _ok("the budget", budget), "401": common["401"],
                              "503": common["503"]}}},
            "/v1/snapshot": {"post": {
                "summary": "release a synopsis once (admin)", "security": auth,
                "requestBody": _body(snapshot_in),
                "responses": {"200": _ok("the synopsis, published", synopsis),
                              "403": _error("an analyst key on an admin route"),
                              "409": _error("the budget refuses it, or a synopsis was "
                                            "already released"), **common,
                              "503": _error("the ledger is unavailable or busy: nothing "
                                            "was released; retry (Retry-After). Or "
                                            "not_published: the synopsis was released and "
                                            "charged but could not be published")}}},
            "/v1/synopsis": {"get": {
                "summary": "the published synopsis (free)", "security": auth,
                "responses": {"200": _ok("the synopsis", synopsis),
                              "404": _error("none published yet"), "401": common["401"]}}},
            "/v1/complete": {"post": {
                "summary": "complete queries from the synopsis (free)", "security": auth,
                "requestBody": _body(complete_in),
                "responses": {"200": _ok("completions", complete_out),
                              "404": _error("none published yet"), **common}}},
            "/healthz": {"get": {
                "summary": "liveness and whether the ledger answers (no key)",
                "responses": {"200": _ok("up", {"type": "object"}),
                              "503": _error("the ledger does not answer")}}},
            "/openapi.json": {"get": {"summary": "this document (no key)",
                                      "responses": {"200": {"description": "OpenAPI"}}}},
        },
    }
