"""Helpers for the HTTP tests: the in-process client, mailbox row counts, a probe socket
that proves nothing connected to it, and a raw ASGI call that counts the body bytes pulled."""

from __future__ import annotations

import asyncio
import select
import socket
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from sqlalchemy import func
from sqlalchemy import select as sa_select
from starlette.testclient import TestClient

from msgx_engine.http.app import create_app
from msgx_engine.mailbox.tables import cminmsgs

MIB = 1024 * 1024


def client_for(app, **kw) -> TestClient:
    """TestClient over the real app wired to the test's PostgreSQL and MariaDB."""
    return TestClient(create_app(mailbox=app.mailbox, engine=app.engine,
                                 max_body_bytes=app.settings.max_body_bytes, **kw))


def inbox_count(app) -> int:
    with app.mailbox.engine.connect() as conn:
        return int(conn.execute(sa_select(func.count()).select_from(cminmsgs)).scalar_one())


def assert_refused(resp, status: int, code: str) -> None:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    doc = resp.json()
    assert doc["is_success"] is False and doc["err_code"] == code, doc
    assert isinstance(doc["err_msg"], str) and doc["err_msg"]
    assert "body" not in doc


@contextmanager
def listening_probe() -> Iterator[tuple[int, socket.socket]]:
    """A loopback listener an entity can point at; ``connected(sock)`` tells whether anyone came."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    try:
        yield srv.getsockname()[1], srv
    finally:
        srv.close()


def connected(srv: socket.socket) -> bool:
    """A completed loopback connect sits in the accept queue at once, so no waiting is needed."""
    readable, _, _ = select.select([srv], [], [], 0)
    return bool(readable)


@dataclass
class AsgiResult:
    status: int = 0
    body: bytes = b""
    pulled: int = 0
    receives: int = 0
    headers: dict[str, str] = field(default_factory=dict)


def call_asgi(asgi, path: str, headers: dict[str, str], chunks: Iterable[bytes], method: str = "POST") -> AsgiResult:
    """Drive the ASGI app directly, feeding body chunks on demand and counting what it pulled."""
    result = AsgiResult()
    source = iter(chunks)

    async def receive() -> dict:
        result.receives += 1
        chunk = next(source, None)
        if chunk is None:
            return {"type": "http.request", "body": b"", "more_body": False}
        result.pulled += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": True}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            result.status = message["status"]
            result.headers = {k.decode().lower(): v.decode() for k, v in message.get("headers", [])}
        elif message["type"] == "http.response.body":
            result.body += message.get("body", b"")

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 8080),
    }
    asyncio.run(asgi(scope, receive, send))
    return result
