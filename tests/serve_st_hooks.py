"""schemathesis hooks for ``brace serve``'s contract test (``test_serve_edges.py``).

JSON Schema cannot state two refusals of the library: a box ``bounds`` needs ``lo < hi``
in every coordinate, and a release's parameters (ε, δ, steps, method, release) must
admit a plan (``brace.plan.plan_release``, public values only: e.g. no smooth release at
ε = 1e-6 and δ = 1e-300). Generated bodies that the server's own models accept but
these refuse are filtered out here, by the library's own functions, and counted in
``$BRACE_ST_FILTERED`` (a file): every other body is sent as generated."""

from __future__ import annotations

import os

import schemathesis

from brace._validation import check_bounds
from brace.plan import plan_release
from brace.seeding import parse_domain
from brace.serve.requests import Limits, RequestError, coordinate_limit, request_models

_N, _D, _R, _T = (float(x) for x in os.environ["BRACE_ST_SHAPE"].split(","))
_N, _D, _T = int(_N), int(_D), int(_T)
_MODELS = request_models(_D, Limits(max_steps=_T), coordinate_limit(_N, _D, _R, _T), _R)


def _count(what: str) -> None:
    path = os.environ.get("BRACE_ST_FILTERED")
    if path:
        with open(path, "a") as fh:
            fh.write(what + "\n")


def _refused_beyond_schema(path: str, body: object) -> str | None:
    """Why the library refuses ``body``, valid per the server's models, for a reason the
    schema cannot state; None otherwise."""
    try:
        if path == "/v1/retrieve":
            req = _MODELS.retrieve_request(body)
            delta = req.delta if req.delta is not None else 1e-7  # 1% of the budget's
            plan_release((_N, _D), radius=_R, method=req.method, epsilon=req.epsilon,
                         delta=delta, steps=req.steps, release=req.release,
                         queries=req.queries.shape[0], noise="secure")
        elif path == "/v1/snapshot":
            req = _MODELS.snapshot_request(body)
            if "bounds" in req.kwargs:
                if "seeds" in req.kwargs:
                    check_bounds(req.kwargs["bounds"], _D)
                else:  # the seedless form: parse_domain's ranges too
                    parse_domain(req.kwargs["bounds"], None, _D)
    except RequestError:
        return None  # not valid per the schema
    except ValueError as exc:
        return str(exc)
    return None


@schemathesis.hook
def filter_failure(ctx, failure, case, response):
    """Keep every failure but a 422 to a schema-valid body that the library refuses for
    a reason the schema cannot state (counted)."""
    if type(failure).__name__ != "RejectedPositiveData" or response.status_code != 422:
        return True
    why = _refused_beyond_schema(case.operation.path, case.body)
    try:
        said = response.json().get("message")
    except ValueError:
        said = None
    if why is None or said != why:  # only the library's own refusal of this very body
        return True
    _count(f"{case.operation.path}: {why[:100]}")
    return False
