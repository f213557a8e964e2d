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

_END = b"\r\n\r\n"


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
    """Mixin over a uvicorn HTTP protocol: bounds the request head (see the module)."""

    limits: Limits | None = None
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop

    def _guard_limits(self) -> Limits:
        return type(self).limits or _env_limits()

    def _await_head(self) -> None:
        self._head_bytes, self._head_tail, self._in_head = 0, b"", True
        timer = getattr(self, "_head_timer", None)
        if timer is not None:
            timer.cancel()
        self._head_timer = self.loop.call_later(self._guard_limits().header_timeout,
                                                self._head_timeout)

    def _head_done(self) -> None:
        self._in_head = False
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timeout(self) -> None:
        self._head_timer = None
        if self._in_head and not self.transport.is_closing():
            if self._head_bytes:
                self.transport.write(_response(
                    408, "Request Timeout", "the request's headers did not arrive within "
                    f"{self._guard_limits().header_timeout:g} s."))
            self.transport.close()

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._head_timer = None
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        if getattr(self, "_head_timer", None) is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)  # type: ignore[misc]

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        if not self.transport.is_closing():
            self._await_head()

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            limit = self._guard_limits().max_header
            window = self._head_tail + data
            end = window.find(_END)
            used = self._head_bytes + (len(data) if end < 0 else
                                       end + len(_END) - len(self._head_tail))
            if used > limit:
                self._in_head = False
                if not self.transport.is_closing():
                    self.transport.write(_response(
                        431, "Request Header Fields Too Large", "the request line and "
                        f"headers are larger than this server's limit of {limit} bytes."))
                    self.transport.close()
                return
            if end < 0:
                self._head_bytes, self._head_tail = used, window[-3:]
            else:
                self._head_done()
        super().data_received(data)  # type: ignore[misc]


def _classes() -> tuple[type, type | None]:
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11(_HeadGuard, H11Protocol):
        pass

    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # httptools not installed
        return GuardedH11, None

    class GuardedHttpTools(_HeadGuard, HttpToolsProtocol):
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
