"""The HTTP/1.1 connection of ``brace serve``: uvicorn's protocol (httptools where it is
installed, else h11) with the request head bounded in size and time, whichever parser
runs (uvicorn with httptools ignores h11's size limit and has no time-out before a
request's headers are complete):

* the request line and headers together hold at most ``Limits.max_header`` bytes
  (16 KiB): beyond, 431 and the connection is closed, before the rest is buffered;
* they must arrive within ``Limits.header_timeout`` seconds of the connection's start
  (or of the previous response): otherwise 408 (or, if nothing came, nothing) and the
  connection is closed — a client that sends its head a byte at a time holds no
  connection for longer.

The body's deadline is the application's (:mod:`.app`: 408). Limits come from the
class attribute ``limits`` (one process) or ``$BRACE_SERVE_CONFIG`` (worker processes).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
from typing import Any

from .requests import Limits

__all__ = ["GuardedHttpTools", "GuardedH11", "guarded_protocol"]



@functools.lru_cache(maxsize=1)
def _env_limits() -> Limits:
    from .service import CONFIG_ENV

    text = os.environ.get(CONFIG_ENV)
    return Limits(**json.loads(text)["limits"]) if text else Limits()


def _response(status: int, reason: str, message: str) -> bytes:
    body = json.dumps({"error": reason.lower().replace(" ", "_"), "message": message}
                      ).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body


class _HeadGuard:
    """Mixin over a uvicorn HTTP protocol: the head's time-out. From the connection's
    start, and from the end of each response, a request's head must arrive within
    ``header_timeout`` seconds: when the timer fires with no request in progress, the
    connection is closed (with 408 if some of a head had come)."""

    limits: Limits | None = None
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    cycle: Any

    def _guard_limits(self) -> Limits:
        return type(self).limits or _env_limits()

    def _arm(self) -> None:
        self._disarm()
        self._seen = 0
        self._head_timer = self.loop.call_later(self._guard_limits().header_timeout,
                                                self._head_timeout)

    def _disarm(self) -> None:
        timer = getattr(self, "_head_timer", None)
        if timer is not None:
            timer.cancel()
        self._head_timer = None

    def _head_timeout(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a request is being answered; re-armed when its response is complete
        if self._seen:
            self.transport.write(_response(
                408, "Request Timeout", "the request's headers did not arrive within "
                f"{self._guard_limits().header_timeout:g} s."))
        self.transport.close()

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)  # type: ignore[misc]

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        if not self.transport.is_closing():
            self._arm()

    def data_received(self, data: bytes) -> None:
        self._seen += len(data)
        super().data_received(data)  # type: ignore[misc]


class _HeadSize:
    """Mixin over uvicorn's httptools protocol (h11 has its own limit,
    ``h11_max_incomplete_event_size``): the bytes received while a head is incomplete
    are counted, and past ``max_header`` the request is answered 431 and the connection
    closed, before httptools buffers more of it."""

    _state = "idle"  # "idle" (between messages), "head", "body"
    _head_bytes = 0

    def data_received(self, data: bytes) -> None:
        if self._state != "body":
            self._head_bytes += len(data)
        super().data_received(data)  # type: ignore[misc]
        limit = self._guard_limits().max_header  # type: ignore[attr-defined]
        if self._state != "body" and self._head_bytes > limit and \
                not self.transport.is_closing():  # type: ignore[attr-defined]
            self._state = "body"
            self.transport.write(_too_large(limit))  # type: ignore[attr-defined]
            self.transport.close()  # type: ignore[attr-defined]

    def on_message_begin(self) -> None:
        self._state = "head"
        super().on_message_begin()  # type: ignore[misc]

    def on_headers_complete(self) -> None:
        self._state, self._head_bytes = "body", 0
        super().on_headers_complete()  # type: ignore[misc]

    def on_message_complete(self) -> None:
        self._state, self._head_bytes = "idle", 0
        super().on_message_complete()  # type: ignore[misc]


def _too_large(limit: int) -> bytes:
    return _response(431, "Request Header Fields Too Large", "the request line and headers "
                     f"are larger than this server's limit of {limit} bytes.")


def _classes() -> tuple[type, type | None]:
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11(_HeadGuard, H11Protocol):
        """h11 refuses a head over ``h11_max_incomplete_event_size`` (set to
        ``max_header``) as a protocol error: answered 431, not 400."""

        def send_400_response(self, msg: str) -> None:
            limit = self._guard_limits().max_header
            if len(self.conn.trailing_data[0]) > limit:  # h11: "Receive buffer too long"
                self.transport.write(_too_large(limit))
                self.transport.close()
                return
            super().send_400_response(msg)

    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # httptools not installed
        return GuardedH11, None

    class GuardedHttpTools(_HeadSize, _HeadGuard, HttpToolsProtocol):
        pass

    return GuardedH11, GuardedHttpTools


try:
    GuardedH11, GuardedHttpTools = _classes()
except ImportError:  # uvicorn not installed: brace serve says so
    GuardedH11 = GuardedHttpTools = None  # type: ignore[assignment,misc]
for _cls in (GuardedH11, GuardedHttpTools):
    if _cls is not None:
        _cls.__module__, _cls.__qualname__ = __name__, _cls.__name__


def guarded_protocol() -> str:
    """The import path of the guarded protocol for uvicorn's ``http=`` (httptools where
    installed, else h11)."""
    return f"{__name__}:{'GuardedHttpTools' if GuardedHttpTools else 'GuardedH11'}"
