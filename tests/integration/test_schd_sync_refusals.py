"""POST /schd/sync refuses what it cannot register, with the documented error JSON, never a 500
(US-08 AC6, US-02 AC3, D23): a window spanning days, years SIS cannot carry, a deeply nested body,
a 5,000-digit number; and 503 when the state database cannot take the registration."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from msgx_engine.db import make_engine
from msgx_engine.http.app import create_app
from msgx_engine.http.server import RqfdSyncRegistrar, sync_registrar
from msgx_engine.requests.tracker import RequestTracker
from tests.http_support import assert_refused


def served(app, registrar=None) -> TestClient:
    return TestClient(create_app(mailbox=app.mailbox, engine=app.engine,
                                 schd_sync=registrar or sync_registrar(app)), raise_server_exceptions=False)


def post(client, body: bytes):
    return client.post("/schd/sync", content=body, headers={"Content-Type": "application/json"})


def registered(app) -> int:
    with app.engine.connect() as conn:
        return conn.exec_driver_sql("SELECT count(*) FROM req_track").scalar_one()


@pytest.mark.parametrize(("body", "code"), [
    (json.dumps({"startDate": "2021-09-11 12:00", "endDate": "2021-09-12 06:00"}).encode(), "invalid_range"),
    (json.dumps({"startDate": "2100-01-01 08:00", "endDate": "2100-01-01 09:00"}).encode(), "invalid_range"),
    (json.dumps({"startDate": "1999-12-31 08:00", "endDate": "1999-12-31 09:00"}).encode(), "invalid_range"),
    (b"[" * 30_000 + b"]" * 30_000, "invalid_json"),
    (b'{"startDate": ' + b"9" * 5000 + b', "endDate": "2021-01-23 10:00"}', "invalid_json"),
    (b'{"startDate": "2021-01-23 08:00", "endDate": "2021-01-23 10:00", "x": ' + b"1" * 5000 + b"}",
     "invalid_json"),
], ids=["multi_day", "year_2100", "year_1999", "deep_nesting", "long_number_field", "long_number_extra"])
def test_d23_sync_refusals_are_400_and_register_nothing(app, body, code):
    """D23, US-08 AC6, US-02 AC3: each refusal is a 400 with the error JSON; nothing registered."""
    assert_refused(post(served(app), body), 400, code)
    assert registered(app) == 0


def test_sync_answers_503_when_the_state_database_is_down(app):
    """US-02 AC3 (error JSON), C-33: the registrar's database is unreachable: 503 db_unavailable,
    never a 500 and never "registered"."""
    dead = make_engine("postgresql+psycopg://postgres@127.0.0.1:1/nowhere")
    try:
        registrar = RqfdSyncRegistrar(RequestTracker(dead, app.mailbox, app.clock))
        resp = post(served(app, registrar), json.dumps({"startDate": "2021-01-23 00:00",
                                                        "endDate": "2021-01-23 23:59"}).encode())
        assert_refused(resp, 503, "db_unavailable")
    finally:
        dead.dispose()
    assert registered(app) == 0
