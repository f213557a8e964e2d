"""The ASGI application of ``brace serve`` (Starlette; run by uvicorn).

Routes: ``POST /v1/retrieve``, ``GET /v1/budget``, ``POST /v1/snapshot`` (admin),
``GET /v1/synopsis``, ``POST /v1/complete``, ``GET /healthz``, ``GET /openapi.json``
(``docs/deploying.md``). Every response is JSON; every refusal is a 4xx with one clear
sentence; a failure is a 500 or 503 whose cause is logged by the server, never sent
(no traceback, nothing computed from the bank).

Calls that touch the ledger run one at a time per process, in arrival order (a FIFO
capacity limiter of one thread), so queued calls wait their turn instead of polling
for a lock; processes and hosts are serialised by the ledger.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..budget import AdmittedCallFailed, BudgetExceededError
from ..ledger import LedgerError, LedgerLockTimeout
from ..ledger.backend import LedgerUnavailable
from .keys import ApiKey
from .openapi import ROUTES, openapi_document
from .requests import (
    RequestError,
    check_content_type,
    coordinate_limit,
    parse_json,
    request_models,
)
from .service import (
    CONFIG_ENV,
    NoSynopsis,
    NotPublished,
    ReleaseFailed,
    ServeConfig,
    Service,
    SnapshotExists,
)

__all__ = ["create_app", "app_from_env", "configure_logging"]

log = logging.getLogger("brace.serve")


def _error(status: int, kind: str, message: str, headers: dict[str, str] | None = None,
           **extra: Any) -> JSONResponse:
    return JSONResponse({"error": kind, "message": message, **extra}, status_code=status,
                        headers=headers)


def _response_for(exc: BaseException, route: str, admin: bool = False) -> JSONResponse:
    """The response for an exception; what is not the caller's to know is logged (the
    place of other analysts' queries in a 409 goes to admin keys only)."""
    if isinstance(exc, RequestError):
        headers = ({"WWW-Authenticate": "Bearer"} if exc.status == 401 else
                   {"Connection": "close"} if exc.status in (408, 413) else None)
        return _error(exc.status, exc.kind, str(exc), headers)
    if isinstance(exc, BudgetExceededError):
        message = str(exc)
        if exc.place:
            log.info("%s: 409; %s", route, exc.place)
            if not admin:  # where earlier queries were asked: not an analyst's to know
                message = message.replace(" " + exc.place, "")
        return _error(409, "budget_exceeded", message, spent=exc.spent,
                      remaining=exc.remaining, reason=exc.reason,
                      affordable_epsilon=exc.affordable_epsilon)
    if isinstance(exc, SnapshotExists):
        return _error(409, "snapshot_exists", str(exc))
    if isinstance(exc, NoSynopsis):
        return _error(404, "no_synopsis", str(exc))
    if isinstance(exc, NotPublished):
        ref = uuid.uuid4().hex[:12]
        log.error("%s [%s]: %s", route, ref, exc, exc_info=exc.__cause__ or exc)
        return _error(503, "not_published", "the synopsis was released and charged to the "
                      "budget (its rounds are in the ledger) but could not be published "
                      f"(reference {ref} in the server's log). POST /v1/snapshot with "
                      "\"again\": true releases another, paid again.")
    if isinstance(exc, LedgerLockTimeout):
        log.warning("%s: %s", route, exc)
        return _error(503, "ledger_busy", "the ledger stayed locked by other calls past the "
                      "server's lock time-out; nothing was released or spent. Retry.",
                      {"Retry-After": "1"})
    if isinstance(exc, LedgerUnavailable):
        log.warning("%s: %s", route, exc)
        return _error(503, "ledger_unavailable", "the ledger's database is unavailable; "
                      "nothing was returned. Retry when it is back.", {"Retry-After": "2"})
    if isinstance(exc, LedgerError):
        ref = uuid.uuid4().hex[:12]
        log.error("%s [%s]: ledger error: %s", route, ref, exc)
        return _error(503, "ledger_error", f"the ledger cannot be used (reference {ref} in "
                      "the server's log); nothing was released. The operator must act.")
    if isinstance(exc, ValueError | TypeError) and not isinstance(exc, ReleaseFailed):
        return _error(422, "invalid_request", str(exc))
    ref = uuid.uuid4().hex[:12]
    if isinstance(exc, AdmittedCallFailed) and isinstance(exc.__cause__, LedgerUnavailable):
        # the database went away while the release was recorded: its charge stands
        log.warning("%s [%s]: ledger unavailable after admission (charged): %s", route,
                    ref, exc.__cause__)
        return _error(503, "ledger_unavailable", "the ledger's database became unavailable "
                      "while the release was recorded; the call's budget was charged, "
                      "nothing was released. Retry when it is back.", {"Retry-After": "2"})
    if isinstance(exc, AdmittedCallFailed):  # admitted, charged, then failed
        log.error("%s [%s]: failed after admission (charged)", route, ref,
                  exc_info=exc.__cause__ or exc)
        return _error(500, "internal", f"internal error (reference {ref} in the server's "
                      "log); the call's budget was charged, nothing was released.")
    failed = isinstance(exc, ReleaseFailed)  # admitted, then failed before any record
    cause = exc.__cause__ if failed and exc.__cause__ else exc
    log.error("%s [%s]: internal error", route, ref, exc_info=cause)
    return _error(500, "internal", f"internal error (reference {ref} in the server's log)"
                  + ("; nothing was released or spent." if failed else "."))


def create_app(config: ServeConfig, service: Service | None = None) -> Starlette:
    """The application. Without ``service`` it opens one now (the request schemas need
    the bank's dimension) and closes it at shutdown; give one to share it (tests)."""
    own = service is None
    state: dict[str, Any] = {"service": service if service is not None else Service(config)}
    limits = config.limits
    n, dim = state["service"].bank.shape
    coord = coordinate_limit(int(n), int(dim), config.radius, limits.max_steps)
    models = request_models(int(dim), limits, coord, config.radius)
    openapi = openapi_document(int(dim), limits, coord, config.radius)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if own:
            svc = state["service"]
            for w in svc.key_warnings:
                log.warning("%s", w)
            log.info("brace serve (pid %d): %s; query coordinates within ±%.6g (the "
                     "schema's range: the library's checks at the extreme plan)",
                     os.getpid(), svc.describe(), coord)
        try:
            yield
        finally:
            if own:
                state["service"].close()

    def svc() -> Service:
        return state["service"]

    async def in_ledger_thread(fn: Callable[..., Any], *args: Any) -> Any:
        if "limiter" not in state:  # made once, at the first call, in the event loop
            state["limiter"] = anyio.CapacityLimiter(1)
        return await anyio.to_thread.run_sync(fn, *args, limiter=state["limiter"])

    def authorise(request: Request, admin: bool = False) -> ApiKey:
        header = request.headers.get("authorization")
        if header is None:
            raise RequestError(401, "unauthorized", "this route needs a key: send the "
                               "header 'Authorization: Bearer <token>'.")
        scheme, _, token = header.partition(" ")
        key = svc().keys.identify(token.strip()) if scheme.lower() == "bearer" else None
        if key is None:
            raise RequestError(401, "unauthorized", "the bearer token is not a key of this "
                               "server.")
        if admin and not key.is_admin:
            raise RequestError(403, "forbidden", f"key {key.name!r} is an analyst's; this "
                               "route needs an admin key.")
        request.state.key = key.name
        request.state.admin = key.is_admin
        return key

    async def json_body(request: Request) -> Any:
        """The body, read within ``limits.body_timeout`` seconds (408) and at most
        ``limits.max_body`` bytes (413), as JSON (400)."""
        check_content_type(request.headers.get("content-type"))
        cl = request.headers.get("content-length")
        too_big = RequestError(413, "payload_too_large", f"the body is larger than this "
                               f"server's limit of {limits.max_body} bytes.")
        if cl is not None:
            if not cl.strip().isdigit():
                raise RequestError(400, "invalid_request", "malformed Content-Length.")
            if int(cl) > limits.max_body:
                raise too_big
        chunks, size = [], 0
        try:
            with anyio.fail_after(limits.body_timeout):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limits.max_body:
                        raise too_big
                    chunks.append(chunk)
        except TimeoutError:
            raise RequestError(408, "request_timeout", f"the body did not arrive within "
                               f"{limits.body_timeout:g} s.") from None
        return parse_json(b"".join(chunks))

    def route(fn: Callable[[Request], Any]) -> Callable[[Request], Any]:
        name = fn.__name__

        async def endpoint(request: Request) -> JSONResponse:
            t0 = time.perf_counter()
            try:
                response = await fn(request)
            except Exception as exc:  # every failure is a JSON response, never a traceback
                response = _response_for(exc, name, getattr(request.state, "admin", False))
            if log.isEnabledFor(logging.DEBUG):  # request.url is built on demand
                log.debug("%s %s -> %d in %.1f ms (key %s)", request.method,
                          request.url.path, response.status_code,
                          1e3 * (time.perf_counter() - t0), getattr(request.state, "key", "-"))
            return response

        endpoint.__name__ = name
        return endpoint

    @route
    async def retrieve(request: Request) -> JSONResponse:
        authorise(request)
        req = models.retrieve_request(await json_body(request))
        return JSONResponse(await in_ledger_thread(svc().retrieve, req))

    @route
    async def budget(request: Request) -> JSONResponse:
        authorise(request)
        return JSONResponse(await in_ledger_thread(svc().budget))

    @route
    async def snapshot(request: Request) -> JSONResponse:
        authorise(request, admin=True)
        req = models.snapshot_request(await json_body(request))
        return JSONResponse(await in_ledger_thread(svc().snapshot, req))

    @route
    async def synopsis(request: Request) -> JSONResponse:
        authorise(request)
        return JSONResponse(await anyio.to_thread.run_sync(svc().synopsis))

    @route
    async def complete(request: Request) -> JSONResponse:
        authorise(request)
        req = models.complete_request(await json_body(request))
        return JSONResponse(await anyio.to_thread.run_sync(svc().complete, req))

    @route
    async def healthz(request: Request) -> JSONResponse:
        ok, what = await anyio.to_thread.run_sync(svc().probe)
        return JSONResponse({"status": "ok" if ok else "unavailable", "ledger": what},
                            status_code=200 if ok else 503)

    async def openapi_json(request: Request) -> JSONResponse:
        return JSONResponse(openapi)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        status = getattr(exc, "status_code", 500)
        kind = {404: "not_found", 405: "method_not_allowed"}.get(status, "http_error")
        text = {404: f"no route {request.url.path}; see /openapi.json.",
                405: f"{request.method} is not allowed on {request.url.path}."}.get(
            status, str(getattr(exc, "detail", "error")))
        return _error(status, kind, text, getattr(exc, "headers", None))  # 405: Allow

    async def server_error(request: Request, exc: Exception) -> JSONResponse:
        return _response_for(exc, request.url.path)

    handlers = {"retrieve": retrieve, "budget": budget, "snapshot": snapshot,
                "synopsis": synopsis, "complete": complete, "healthz": healthz,
                "openapi": openapi_json}
    routes = [Route(r.path, handlers[r.name], methods=[r.method]) for r in ROUTES]
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: http_error,
                                        Exception: server_error})
    return _HeaderLimit(app, limits.max_header)  # type: ignore[return-value]


class _HeaderLimit:
    """431 for a request whose line and headers exceed ``limit`` bytes, whatever server
    runs the application (``brace serve``'s protocol refuses them earlier,
    :mod:`.protocol`)."""

    def __init__(self, app: Starlette, limit: int) -> None:
        self.app, self.limit = app, limit

    def __getattr__(self, name: str) -> Any:  # router, state, …: the application's
        return getattr(self.app, name)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            size = (len(scope.get("raw_path") or b"") + len(scope.get("query_string", b""))
                    + sum(len(k) + len(v) + 4 for k, v in scope["headers"]))
            if size > self.limit:
                await _error(431, "request_header_fields_too_large", "the request line and "
                             f"headers are larger than this server's limit of {self.limit} "
                             "bytes.", {"Connection": "close"})(scope, receive, send)
                return
        await self.app(scope, receive, send)


def configure_logging(level: str) -> None:
    """The server's log (``brace.serve``) on standard error, as uvicorn's own."""
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s:     brace: %(message)s"))
        log.addHandler(handler)
        log.propagate = False
    log.setLevel(level.upper())


def app_from_env() -> Starlette:
    """The application of a worker process: configured by ``$BRACE_SERVE_CONFIG``
    (set by ``brace serve``)."""
    text = os.environ.get(CONFIG_ENV)
    if not text:
        raise RuntimeError(f"${CONFIG_ENV} is not set: start the server with 'brace serve'.")
    config = ServeConfig.from_json(text)
    configure_logging(config.log_level)
    return create_app(config)
