"""POST /schd/sync through request tracking to a DONE request (US-08 AC2/AC3/AC6, D16, C-23/C-24,
C-33, US-06 AC4): registered (never "plan updated"), sent to COUTMSGS by the tracking round, and
completed by the AODB's SCHD RESP for the requested day processed by the real pump."""

from __future__ import annotations

import json
from datetime import date

from snapshot_builders import flights, fltr, pump, query, schd, sodt, status
from sqlalchemy import text
from starlette.testclient import TestClient

from msgx_engine.http.app import create_app
from msgx_engine.http.server import sync_registrar
from msgx_engine.requests.tracker import RequestTracker
from msgx_engine.sis.decode import decode

D9 = date(2026, 9, 9)


def served_client(app) -> TestClient:
    """The app as ``msgx serve`` builds it: with the request-tracking registrar."""
    return TestClient(create_app(mailbox=app.mailbox, engine=app.engine, schd_sync=sync_registrar(app)))


def post_sync(client, start="2026-09-09 00:00", end="2026-09-09 23:59"):
    return client.post("/schd/sync", content=json.dumps({"startDate": start, "endDate": end}).encode(),
                       headers={"Content-Type": "application/json"})


def coutmsgs(app) -> list[tuple]:
    with app.mailbox.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(
            "SELECT COUTMSGS_ID, ROUTINGID, COUTMSGS_CLOB_MSG FROM coutmsgs ORDER BY COUTMSGS_ID"))]


def request_row(app, req_id: int) -> tuple:
    (row,) = query(app, "SELECT status, fday, coutmsgs_id, answer_msg_id FROM req_track WHERE req_id = :r", r=req_id)
    return row


def test_sync_registers_and_says_registered_not_updated(app):
    """US-08 AC6, C-33, Q17: 202 with state REGISTERED, the request id and the requested day; the
    answer never claims the plan is updated; nothing is in COUTMSGS yet (AC2: registered first)."""
    resp = post_sync(served_client(app))
    assert resp.status_code == 202, resp.text
    body = resp.json()["body"]
    assert (body["state"], body["type"], body["styp"], body["fday"], body["expired"]) == (
        "REGISTERED", "RQFD", "NONE", "2026-09-09", [])
    assert "updated" not in json.dumps({k: v for k, v in body.items() if k != "note"})
    assert "not updated" in body["note"]
    assert request_row(app, body["request_id"]) == ("REGISTERED", D9, None, None)
    assert coutmsgs(app) == []

    again = post_sync(served_client(app), "2026-09-10 00:00", "2026-09-10 23:59").json()["body"]
    assert again["expired"] == [body["request_id"]] and again["fday"] == "2026-09-10"


def test_sync_to_done_end_to_end(app, clock):
    """US-08 AC2-AC6 + US-06 AC4, D16: POST -> REGISTERED -> tracking round writes COUTMSGS
    (VIEWRQFD, the window as STDB/STDE) -> SENT -> the AODB's SCHD RESP for 9/9 is processed by
    the pump, applied to 9/9 and completes the request (DONE, answer_msg_id) in its transaction."""
    req_id = post_sync(served_client(app)).json()["body"]["request_id"]
    tracker = RequestTracker(app.engine, app.mailbox, app.clock)
    assert tracker.track().sent == [req_id]
    ((cid, routing, body),) = coutmsgs(app)
    msg = decode(body)
    assert (routing, msg.meta.type, msg.meta.styp) == ("VIEWRQFD", "RQFD", "NONE")
    assert msg.root.findtext("RQFD/STDB") == "09SEP260000" and msg.root.findtext("RQFD/STDE") == "09SEP262359"
    assert request_row(app, req_id) == ("SENT", D9, cid, None)

    clock.advance(20)                     # answered inside the 60 s window
    assert tracker.track().timed_out == []
    # ManualClock starts 2026-01-01 00:00 UTC = 08:00 local; the answer is stamped after sending.
    (m,) = pump(app, schd("RESP", fltr("A", sodt(9)), fltr("B", sodt(9)), dttm="20260101080100"))
    assert status(app, m) == ("SUCCEEDED", None)
    assert request_row(app, req_id) == ("DONE", D9, cid, m)
    assert {f: v[0] for f, v in flights(app).items()} == {"A": D9, "B": D9}


def test_an_answer_after_the_timeout_changes_nothing(app, clock):
    """US-08 AC3/AC5, C-23, D16: 60 s after sending with no answer the request is TIMEOUT; a late
    RESP then finds no open request and is SKIPPED(no_request) without writing flights."""
    req_id = post_sync(served_client(app)).json()["body"]["request_id"]
    tracker = RequestTracker(app.engine, app.mailbox, app.clock)
    tracker.track()
    clock.advance(60)
    assert tracker.track().timed_out == [req_id]
    (m,) = pump(app, schd("RESP", fltr("A", sodt(9)), dttm="20260101080200"))
    assert status(app, m) == ("SKIPPED", "no_request")
    assert flights(app) == {}
    assert request_row(app, req_id)[0] == "TIMEOUT"
