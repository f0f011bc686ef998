"""API access control and the access log over a real socket (OPS-2): ``msgx serve``
as a process against the test's PostgreSQL and MariaDB.

MSGX_API_TOKEN set -> every endpoint but GET /metrics and /openapi.json needs ``Authorization:
Bearer <token>`` (401 with the documented error JSON otherwise); ``--allow-public`` refuses to start
without a token (exit 2); one access-log line per request, never the body or the token."""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import sys

from msgx_engine.http.errors import ERROR_CODES
from tests.builders import gtdt
from tests.http_support import inbox_count, serve_process

TOKEN = "tok-3b9f2c-not-a-real-secret"
ACCESS = re.compile(r"msgx\.http\.access: (GET|POST) (\S+) (\d{3}) (\d+\.\d)ms 127\.0\.0\.1:\d+$")


def call(port: int, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def assert_unauthorized(answer: tuple[int, dict[str, str], bytes]) -> None:
    status, headers, body = answer
    assert status == 401 == ERROR_CODES["unauthorized"].status
    assert headers["content-type"].startswith("application/json")
    assert headers["www-authenticate"].startswith("Bearer")
    doc = json.loads(body)
    assert doc["is_success"] is False and doc["err_code"] == "unauthorized" and doc["err_msg"]


def test_token_guards_every_endpoint_but_metrics_and_openapi(env_for, app):
    """Item 5: without the right bearer token the API endpoints (and unknown paths) answer 401 and
    write nothing; with it they work; /metrics and /openapi.json stay open. The access log has one
    line per request with method, path, status, duration and client, and never the body or token."""
    message = gtdt("SECRETBODY77", (1, "Z9")).encode()
    xml = {"Content-Type": "text/xml"}
    good = {"Authorization": f"Bearer {TOKEN}"}
    with serve_process(env_for(MSGX_API_TOKEN=TOKEN)) as (port, proc):
        assert_unauthorized(call(port, "GET", "/all/flights"))
        assert_unauthorized(call(port, "GET", "/all/flights", headers={"Authorization": "Bearer wrong"}))
        assert_unauthorized(call(port, "GET", "/all/flights", headers={"Authorization": f"Basic {TOKEN}"}))
        assert_unauthorized(call(port, "POST", "/cminmsgs/send", message, xml))
        assert_unauthorized(call(port, "POST", "/schd/sync", b"{}", {"Content-Type": "application/json"}))
        assert_unauthorized(call(port, "GET", "/no/such/path"))
        assert inbox_count(app) == 0
        status, _, body = call(port, "POST", "/cminmsgs/send", message, {**xml, **good})
        assert status == 200 and json.loads(body)["is_success"] is True and inbox_count(app) == 1
        assert call(port, "GET", "/all/flights", headers=good)[0] == 200
        status, headers, body = call(port, "GET", "/metrics")
        assert status == 200 and headers["content-type"].startswith("text/plain") and b"msgx_database_up 1" in body
        status, _, body = call(port, "GET", "/openapi.json")
        assert status == 200 and "bearer" in json.loads(body)["components"]["securitySchemes"]
    log = proc.stderr_text
    lines = [ACCESS.search(line) for line in log.splitlines() if "msgx.http.access" in line]
    assert all(lines), log
    assert [(m.group(1), m.group(2), m.group(3)) for m in lines if m] == [
        ("GET", "/all/flights", "401"), ("GET", "/all/flights", "401"), ("GET", "/all/flights", "401"),
        ("POST", "/cminmsgs/send", "401"), ("POST", "/schd/sync", "401"), ("GET", "/no/such/path", "401"),
        ("POST", "/cminmsgs/send", "200"), ("GET", "/all/flights", "200"), ("GET", "/metrics", "200"),
        ("GET", "/openapi.json", "200")]
    assert "SECRETBODY77" not in log and TOKEN not in log


def test_allow_public_refuses_to_start_without_a_token(env_for):
    """Item 5: ``msgx serve --allow-public`` with no MSGX_API_TOKEN exits 2 with a message naming the
    variable, before opening a port."""
    done = subprocess.run([sys.executable, "-m", "msgx_engine.cli", "serve", "--host", "0.0.0.0", "--port", "1",
                           "--allow-public"], env=env_for(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "MSGX_API_TOKEN" in done.stderr and "--allow-public" in done.stderr


def test_allow_public_with_a_token_starts(env_for):
    """With a token and a terminating proxy declared, --allow-public is accepted (here on loopback) and
    the token is enforced (with TLS served by msgx itself: tests/integration/test_http_tls.py)."""
    with serve_process(env_for(MSGX_API_TOKEN=TOKEN), "--allow-public", "--behind-tls-proxy") as (port, _):
        assert_unauthorized(call(port, "GET", "/all/flights"))
        assert call(port, "GET", "/all/flights", headers={"Authorization": f"Bearer {TOKEN}"})[0] == 200
