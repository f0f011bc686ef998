"""Helpers for the HTTP tests: the in-process client, mailbox row counts, a probe socket
that proves nothing connected to it, and a raw ASGI call that counts the body bytes pulled."""

from __future__ import annotations

import asyncio
import json
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sqlalchemy import func, text
from sqlalchemy import select as sa_select
from starlette.testclient import TestClient

from msgx_engine.http.app import create_app
from msgx_engine.mailbox.tables import cminmsgs
from tests.private_servers import free_port

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


def wait_for_port(proc: subprocess.Popen, port: int, deadline_s: float = 60.0) -> None:
    """Poll until the server accepts connections; fail early if it exits, late at the deadline."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"msgx serve exited with {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"msgx serve did not listen on {port} within {deadline_s}s")


@contextmanager
def serve_process(env: dict[str, str], *args: str) -> Iterator[tuple[int, subprocess.Popen]]:
    """``msgx serve`` as a subprocess on a free loopback port; yields (port, process). Its stderr
    (the access log) is a pipe: read it after the block with ``process.stderr_text``."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "msgx_engine.cli", "serve", "--port", str(port), *args],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_port(proc, port)
        yield port, proc
    finally:
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        proc.stderr_text = err      # type: ignore[attr-defined]


# --- alert webhook ---------------------------------------------------------------------------
@dataclass
class Hook:
    url: str
    posts: list[dict] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def texts(self) -> list[str]:
        return [p["text"] for p in self.posts]


@contextmanager
def webhook(*, hang: bool = False) -> Iterator[Hook]:
    """A loopback HTTP server in a thread recording each JSON POST; ``hang`` holds every answer until
    ``hook.release`` is set (a webhook that accepted the connection and never replies)."""
    hook = Hook(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            body = self.rfile.read(int(self.headers["Content-Length"]))
            hook.posts.append(json.loads(body))
            assert self.headers["Content-Type"] == "application/json"
            hook.arrived.set()
            if hang:
                hook.release.wait(60)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    hook.url = f"http://127.0.0.1:{server.server_address[1]}/services/T0/B0/secret-path"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hook
    finally:
        hook.release.set()
        server.shutdown()
        server.server_close()


def make_dead_letter(app, msg_id: int = 900) -> None:
    with app.engine.begin() as conn:
        conn.execute(text("INSERT INTO proc_state (msg_id, status, reason, created_at, updated_at) "
                          "VALUES (:i, 'DEAD', 'malformed', now(), now())"), {"i": msg_id})
