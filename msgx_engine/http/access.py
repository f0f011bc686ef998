"""Access control and the access log of the HTTP API (OPS-2: sensitive operations have access control).

``ApiAccess`` is plain ASGI middleware around the Starlette app:

- with a token (``MSGX_API_TOKEN``), every request but ``GET /metrics``, ``GET /openapi.json`` and the
  probes ``GET /healthz`` and ``GET /readyz`` must carry ``Authorization: Bearer <token>``; the
  comparison is ``hmac.compare_digest`` over bytes (constant time: the answer does not leak how
  much of a guess was right); a refusal is 401 with the documented error JSON and
  ``WWW-Authenticate: Bearer``, and the body is never read;
- one access-log line per request: method, path (never the query string, which callers could use
  for secrets), status, duration in ms and the client address; never a header or the body.

It wraps the app rather than living in a route so that 404/405 answers are guarded and logged too.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from msgx_engine.http.errors import error_response

log = logging.getLogger("msgx.http.access")

# open without the token: monitoring and the probes (a load balancer or orchestrator holds no token)
PUBLIC = frozenset((method, path) for method in ("GET", "HEAD")
                   for path in ("/metrics", "/openapi.json", "/healthz", "/readyz"))

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def printable(path: str, limit: int = 200) -> str:
    """The path as one log-safe line: control characters escaped (a ``%0A`` cannot forge a line), clipped."""
    return path[:limit].encode("unicode_escape").decode("ascii") if not path[:limit].isprintable() else path[:limit]


def bearer_token(scope: Scope) -> bytes | None:
    """The token of the request's ``Authorization: Bearer <token>`` header, if it has one."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.partition(b" ")
            return token.strip() if scheme.lower() == b"bearer" else None
    return None


class ApiAccess:
    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token.encode("utf-8") if token else None

    def allowed(self, scope: Scope) -> bool:
        if self.token is None or (scope["method"], scope["path"]) in PUBLIC:
            return True
        given = bearer_token(scope)
        return given is not None and hmac.compare_digest(given, self.token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0

        async def send_logged(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            if self.allowed(scope):
                await self.app(scope, receive, send_logged)
            else:
                refusal = error_response("unauthorized", "missing or wrong bearer token (Authorization: Bearer …)",
                                         {"WWW-Authenticate": 'Bearer realm="msgx"'})
                await refusal(scope, receive, send_logged)
        finally:
            client = scope.get("client")
            address = f"{client[0]}:{client[1]}" if client else "-"
            log.info("%s %s %s %.1fms %s", scope["method"], printable(scope["path"]), status or "-",
                     (time.perf_counter() - started) * 1000, address)
