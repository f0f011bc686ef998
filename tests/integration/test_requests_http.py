"""POST /schd/sync through request tracking to a DONE request (US-08 AC2/AC3/AC6, D16, C-23/C-24,
C-33, US-06 AC4): registered (never "plan updated"), sent to COUTMSGS by the tracking round, and
completed by the AODB's SCHD RESP for the requested day processed by the real pump."""

from __future__ import annotations

import json
from datetime import date, datetime

from pipeline_support import drain_now, register
from snapshot_builders import dnld, flights, fltr, pump, query, schd, sodt, status
from sqlalchemy import text
from starlette.testclient import TestClient

from msgx_engine.http.app import create_app
from msgx_engine.http.server import sync_registrar
from msgx_engine.requests.tracker import RequestTracker
from msgx_engine.sis.decode import decode
from msgx_engine.sis.times import local

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
    """US-08 AC3/AC5, C-23, D16: 60 s after sending with no answer the request is TIMEOUT; a RESP
    registered after that is SKIPPED(late_answer) without writing flights."""
    req_id = post_sync(served_client(app)).json()["body"]["request_id"]
    tracker = RequestTracker(app.engine, app.mailbox, app.clock)
    tracker.track()
    clock.advance(60)
    assert tracker.track().timed_out == [req_id]
    (m,) = pump(app, schd("RESP", fltr("A", sodt(9)), dttm="20260101080200"))
    assert status(app, m) == ("SKIPPED", "late_answer")
    assert flights(app) == {}
    assert request_row(app, req_id)[0] == "TIMEOUT"


def dttm(clock) -> str:
    """The clock's time as an answer's META DTTM (local, yyyyMMddHHmmss)."""
    return local(clock.now()).strftime("%Y%m%d%H%M%S")


def detail(app, msg_id: int) -> str:
    return query(app, "SELECT error_detail FROM proc_state WHERE msg_id = :m", m=msg_id)[0][0]


def test_a_whole_day_request_waits_for_the_narrow_one_in_flight(app, clock):
    """US-08 AC4/AC5, C-23, C-24 (decision L1; the issue's reproduction): a narrow POST /schd/sync
    for 9/9 (12:00-18:00) is SENT; the whole-day RQFD for 9/9 registered next does not expire it
    and is not sent. The AODB's answer to the narrow request is that request's answer: it deletes
    only inside 12:00-18:00 (before, it was taken as the whole-day answer and deleted the 08:00
    and 20:00 flights too). Then the whole-day request goes out and its answer applies to the
    whole day. A further answer for 9/9 finds its request closed: SKIPPED(late_answer), nothing
    written."""
    pump(app, dnld(*(fltr(f, sodt(9, hhmm=t)) for f, t in (("A08", "0800"), ("B15", "1500"),
                                                            ("C16", "1600"), ("D20", "2000")))))
    client, tracker = served_client(app), RequestTracker(app.engine, app.mailbox, app.clock)
    narrow = post_sync(client, "2026-09-09 12:00", "2026-09-09 18:00").json()["body"]["request_id"]
    assert tracker.track().sent == [narrow]
    whole = tracker.register_rqfd(datetime(2026, 9, 9, 0, 0), datetime(2026, 9, 9, 23, 59))
    assert whole.expired == ()
    assert tracker.track().sent == [] and len(coutmsgs(app)) == 1
    assert (request_row(app, narrow)[0], request_row(app, whole.req_id)[0]) == ("SENT", "REGISTERED")

    clock.advance(5)
    (m1,) = pump(app, schd("RESP", fltr("B15", sodt(9, hhmm="1500")), dttm=dttm(clock)))
    assert status(app, m1) == ("SUCCEEDED", None)
    assert {f: v[1] for f, v in flights(app).items()} == {"A08": False, "B15": False, "C16": True, "D20": False}
    assert request_row(app, narrow) == ("DONE", D9, coutmsgs(app)[0][0], m1)

    assert tracker.track().sent == [whole.req_id]
    clock.advance(5)
    (m2,) = pump(app, schd("RESP", fltr("A08", sodt(9, hhmm="0800")), fltr("B15", sodt(9, hhmm="1500")),
                           dttm=dttm(clock)))
    assert status(app, m2) == ("SUCCEEDED", None)
    assert {f: v[1] for f, v in flights(app).items()} == {"A08": False, "B15": False, "C16": True, "D20": True}
    assert request_row(app, whole.req_id)[0] == "DONE"

    before = flights(app)
    clock.advance(5)
    (m3,) = pump(app, schd("RESP", fltr("A08", sodt(9, hhmm="0800")), dttm=dttm(clock)))
    assert status(app, m3) == ("SKIPPED", "late_answer")
    assert f"request {whole.req_id} was already DONE by message {m2}" in detail(app, m3)
    assert flights(app) == before


def test_an_echoed_seqn_is_not_moved_onto_the_next_request(app, clock):
    """US-08 AC4, C-23 (decision L1): an answer echoing the SEQN of a request that timed out is
    that request's late answer, not the answer of the request sent after it, although it came
    while that one was in flight: SKIPPED(late_answer), nothing written, the newer one stays SENT."""
    tracker = RequestTracker(app.engine, app.mailbox, app.clock)
    first = post_sync(served_client(app)).json()["body"]["request_id"]
    tracker.track()
    (first_seqn,) = query(app, "SELECT seqn FROM req_track WHERE req_id = :r", r=first)[0]
    second = post_sync(served_client(app)).json()["body"]["request_id"]
    clock.advance(60)
    tracker.track()
    clock.advance(60)                     # the rest after a timeout (decision L14)
    assert (tracker.track().sent, request_row(app, first)[0]) == ([second], "TIMEOUT")
    clock.advance(5)
    echo = schd("RESP", fltr("A", sodt(9)), dttm=dttm(clock)).replace("<SCHD>", f"<SEQN>{first_seqn}</SEQN><SCHD>")
    (m,) = pump(app, echo)
    assert status(app, m) == ("SKIPPED", "late_answer")
    assert f"after request {first} was sent" in detail(app, m)
    assert flights(app) == {} and request_row(app, second)[0] == "SENT"


def test_lateness_is_judged_by_when_the_answer_was_registered(app, clock):
    """C-23, Q5 (decision L2): an answer registered 20 s after its request but processed only after
    the tracker's 60 s timeout (a backlog) is applied and completes the request; with the tracker
    stopped, an answer registered (and stamped) an hour after its request is refused as late
    although its request is still SENT."""
    tracker = RequestTracker(app.engine, app.mailbox, app.clock)
    first = post_sync(served_client(app)).json()["body"]["request_id"]
    tracker.track()
    clock.advance(20)
    answer = app.mailbox.put(schd("RESP", fltr("A", sodt(9)), dttm=dttm(clock)))
    assert register(app).registered == 1         # registered now; the pump reaches it only later
    clock.advance(50)
    assert tracker.track().timed_out == [first]
    drain_now(app)
    assert status(app, answer) == ("SUCCEEDED", None)
    assert request_row(app, first)[0] == "DONE" and flights(app) == {"A": (D9, False, 1)}

    second = post_sync(served_client(app), "2026-09-10 00:00", "2026-09-10 23:59").json()["body"]["request_id"]
    assert tracker.track().sent == [second]      # then the tracker stops
    clock.advance(3600)
    (late,) = pump(app, schd("RESP", fltr("B", sodt(10)), dttm=dttm(clock)))
    assert status(app, late) == ("SKIPPED", "late_answer")
    assert "3600 s after request" in detail(app, late)
    assert request_row(app, second)[0] == "SENT" and set(flights(app)) == {"A"}
