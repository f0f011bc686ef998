"""POST /schd/sync validation and its extension point, the OpenAPI description, the documented
error table, and the loopback-only startup rule (US-08 AC6, C-33, US-02 AC3/AC4, US-12, Q3)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from msgx_engine.http.app import create_app
from msgx_engine.http.errors import ERROR_CODES
from msgx_engine.http.schd_sync import SyncWindow
from tests.http_support import assert_refused, client_for

DOC = Path(__file__).resolve().parents[2] / "docs" / "http-api.md"


def sync(client, payload, ctype="application/json"):
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return client.post("/schd/sync", content=body, headers={"Content-Type": ctype})


# --- pure validation ------------------------------------------------------------------------




# --- endpoint ---------------------------------------------------------------------------------
def test_valid_window_is_501_without_a_registrar(app):
    """US-08 AC6, C-33: an app built without a registrar validates, then answers an explicit 501:
    nothing is claimed registered or sent (the served app has one: tests/test_requests_http.py)."""
    resp = sync(client_for(app), {"startDate": "2021-01-23 00:00", "endDate": "2021-01-23 23:59"})
    assert_refused(resp, 501, "not_implemented")
    with app.mailbox.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM coutmsgs").scalar_one() == 0


@pytest.mark.parametrize(("payload", "code"), [
    (b"{not json", "invalid_json"),
    (b"\xff\xfe{}", "invalid_json"),
    ({"startDate": "2021-01-23 10:00"}, "invalid_field"),
    ({"startDate": "2021-01-23 10:00", "endDate": "2021-01-22 10:00"}, "invalid_range"),
])
def test_invalid_requests_are_400_before_the_501(app, payload, code):
    """US-08 AC6: validation errors win over not_implemented, so callers can fix requests now."""
    assert_refused(sync(client_for(app), payload), 400, code)


def test_sync_media_type_and_size(app):
    """Q3: JSON only (415 otherwise), at most 64 KiB (413)."""
    client = client_for(app)
    assert_refused(sync(client, {"startDate": "x"}, ctype="text/plain"), 415, "unsupported_media_type")
    big = b'{"startDate": "' + b"x" * (64 * 1024) + b'"}'
    assert_refused(sync(client, big), 413, "body_too_large")


def test_registrar_extension_point_receives_the_parsed_window(app):
    """US-08 AC6 extension point: a SyncRegistrar gets the validated window and its answer is
    returned as 202 success (a recording stand-in; the real registrar: tests/test_requests_http.py)."""
    seen: list[SyncWindow] = []

    class Recorder:
        def register(self, window: SyncWindow) -> object:
            seen.append(window)
            return {"request_id": 1, "state": "REGISTERED"}

    client = TestClient(create_app(mailbox=app.mailbox, engine=app.engine, schd_sync=Recorder()))
    resp = sync(client, {"startDate": "2021-01-23 00:00", "endDate": "2021-01-23 23:59"})
    assert resp.status_code == 202
    assert resp.json() == {"is_success": True, "body": {"request_id": 1, "state": "REGISTERED"}}
    assert seen == [SyncWindow(datetime(2021, 1, 23, 0, 0), datetime(2021, 1, 23, 23, 59))]


# --- description and documentation ----------------------------------------------------------
def test_openapi_describes_the_endpoints_and_every_error_code(app):
    """Q3: /openapi.json lists the endpoints with their methods and the error enum
    is exactly the code's table; the API endpoints declare the bearer token,
    /metrics and the probes do not."""
    resp = client_for(app).get("/openapi.json")
    assert resp.status_code == 200
    doc = resp.json()
    assert doc["openapi"].startswith("3.")
    assert {p: sorted(m) for p, m in doc["paths"].items()} == {
        "/cminmsgs/send": ["post"], "/all/flights": ["get"], "/schd/sync": ["post"], "/metrics": ["get"],
        "/healthz": ["get"], "/readyz": ["get"], "/flights/{flid}/history": ["get"]}
    assert doc["components"]["schemas"]["Error"]["properties"]["err_code"]["enum"] == sorted(ERROR_CODES)
    send = doc["paths"]["/cminmsgs/send"]["post"]
    assert set(send["requestBody"]["content"]) == {"text/xml", "application/xml", "text/plain"}
    assert {"200", "400", "413", "415", "503"} <= set(send["responses"])
    assert {"200", "401", "503"} == set(doc["paths"]["/all/flights"]["get"]["responses"])
    assert all(doc["paths"][p][m]["security"] == [{"bearer": []}]
               for p, m in (("/cminmsgs/send", "post"), ("/all/flights", "get"), ("/schd/sync", "post")))
    assert all("security" not in doc["paths"][p]["get"] for p in ("/metrics", "/healthz", "/readyz"))
    assert {"200", "503"} == set(doc["paths"]["/readyz"]["get"]["responses"])
    assert "501" in doc["paths"]["/schd/sync"]["post"]["responses"]




# --- bind rule --------------------------------------------------------------------------------




def test_msgx_serve_refuses_a_public_bind(env_for):
    """US-02 AC4 end to end: `msgx serve --host 0.0.0.0` exits 2 with the reason, never listening."""
    proc = subprocess.run([sys.executable, "-m", "msgx_engine.cli", "serve", "--host", "0.0.0.0", "--port", "1"],
                          env=env_for(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "refusing to listen on '0.0.0.0'" in proc.stderr


def test_msgx_serve_refuses_an_unmigrated_database(env_for, pg_dbs):
    """OPS-1 startup refusal: serve checks the state database before opening the port."""
    env = env_for(MSGX_DB_URL=pg_dbs.fresh(migrated=False))
    proc = subprocess.run([sys.executable, "-m", "msgx_engine.cli", "serve", "--port", "1"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "msgx db upgrade" in proc.stderr


def test_unexpected_failure_is_500_with_the_error_json(app):
    """Q3: even a crash answers the documented shape (internal_error), never a bare traceback."""

    class Broken:
        def register(self, window: SyncWindow) -> object:
            raise RuntimeError("boom")

    client = TestClient(create_app(mailbox=app.mailbox, engine=app.engine, schd_sync=Broken()),
                        raise_server_exceptions=False)
    resp = sync(client, {"startDate": "2021-01-23 00:00", "endDate": "2021-01-23 23:59"})
    assert_refused(resp, 500, "internal_error")
    assert "boom" not in resp.text
