"""Slow and surplus clients of ``msgx serve``: timeouts, a connection cap, and
the error JSON for the refusals the HTTP server makes before the app sees a request.

uvicorn times only the idle gap between keep-alive requests: a client that sends its headers (or
its body) slowly holds a connection for as long as it likes, its ``limit_concurrency`` answers a
plain-text 503, and malformed framing gets a plain-text 400. So:

- ``guarded_protocol`` returns uvicorn's h11 protocol with a **header timeout** (the request line
  and headers must arrive within it, counted from the connection or the first byte of a later
  keep-alive request; then 408 ``request_timeout`` and the connection closes), a **connection
  cap** (a connection beyond it is answered 503 ``too_many_connections`` and closed, the app never
  runs for it) and malformed framing answered 400 ``malformed_request`` (h11 refuses it: bad
  request line, header syntax, chunk framing, an unsupported transfer coding, conflicting lengths).
- ``BodyTimeout`` is an ASGI middleware that bounds the whole body read: the body must be
  complete within its timeout from the moment the headers were in, or the read raises
  ``ApiError(request_timeout)`` inside the app, which answers it like any other refusal, with
  ``Connection: close``.
"""

from __future__ import annotations

import asyncio
from http import HTTPStatus
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from msgx_engine.http.errors import ApiError, error_response

ASGIApp = Any   # (scope, receive, send) -> awaitable; Starlette's own alias would pull its types in


def raw_error(code: str, msg: str) -> bytes:
    """A complete HTTP/1.1 error response with ``Connection: close``, written straight to the
    socket where no request exists to answer through h11 (a header timeout)."""
    resp = error_response(code, msg)
    head = [f"HTTP/1.1 {resp.status_code} {HTTPStatus(resp.status_code).phrase}".encode()]
    head += [k + b": " + v for k, v in resp.raw_headers]
    head.append(b"connection: close")
    return b"\r\n".join(head) + b"\r\n\r\n" + bytes(resp.body)


def guarded_protocol(header_timeout_s: float, max_connections: int) -> type[H11Protocol]:
    """The h11 protocol class for ``uvicorn.run(http=...)`` with these limits."""

    class GuardedH11Protocol(H11Protocol):
        header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                # Over the cap: this connection's request is answered 503 without running the app.
                self.app = _busy_app(max_connections)
            self._arm_header_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_header_timer()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self.conn.their_state is h11.IDLE:
                self._arm_header_timer()      # a later keep-alive request: its headers are timed too
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._disarm_header_timer()   # the request line and headers are in

        def send_400_response(self, msg: str) -> None:
            """Malformed framing (h11 refused the bytes): the error JSON instead of uvicorn's text."""
            self._disarm_header_timer()
            resp = error_response("malformed_request", f"the request is not valid HTTP/1.1 ({msg.rstrip('.')})")
            headers = [*resp.raw_headers, (b"connection", b"close")]
            try:
                events = (h11.Response(status_code=resp.status_code, headers=headers),
                          h11.Data(data=bytes(resp.body)), h11.EndOfMessage())
                for event in events:
                    self.transport.write(self.conn.send(event) or b"")
            except h11.LocalProtocolError:    # a response was already under way: just hang up
                pass
            self.transport.close()

        def _arm_header_timer(self) -> None:
            if self.header_timer is None:
                self.header_timer = self.loop.call_later(header_timeout_s, self._header_timeout)

        def _disarm_header_timer(self) -> None:
            if self.header_timer is not None:
                self.header_timer.cancel()
                self.header_timer = None

        def _header_timeout(self) -> None:
            self.header_timer = None
            if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
                return
            self.logger.info("closing a connection whose request headers did not arrive within %.0fs",
                             header_timeout_s)
            self.transport.write(raw_error("request_timeout", f"the request line and headers did not arrive "
                                                              f"within {header_timeout_s:g}s"))
            self.transport.close()

    return GuardedH11Protocol


def _busy_app(max_connections: int) -> ASGIApp:
    async def busy(scope: dict, receive: Any, send: Any) -> None:
        resp = error_response("too_many_connections", f"the server holds its limit of {max_connections} "
                                                      "connections; retry later", headers={"Connection": "close"})
        await resp(scope, receive, send)

    return busy


class BodyTimeout:
    """ASGI middleware: the request body must be complete within ``timeout_s`` of the request's start."""

    def __init__(self, app: ASGIApp, timeout_s: float) -> None:
        self.app = app
        self.timeout_s = timeout_s

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        body_done = False

        async def timed_receive() -> dict:
            nonlocal body_done
            if body_done:
                return await receive()       # waiting for a disconnect after the body is not timed
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                raise ApiError("request_timeout", f"the request body did not arrive within {self.timeout_s:g}s",
                               headers={"Connection": "close"}) from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        await self.app(scope, timed_receive, send)
