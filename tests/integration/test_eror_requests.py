"""EROR through the real pump (C-24, US-08, D9, D28): requests sent by the tracker to the real
MariaDB COUTMSGS, EROR messages of several hand-built shapes in CMINMSGS, req_track in PostgreSQL."""

from __future__ import annotations

import logging
from datetime import datetime

from builders import envelope
from snapshot_builders import pump, query, status

from msgx_engine.requests.tracker import RequestTracker


def eror(body: str, styp: str = "NONE") -> str:
    return envelope("EROR", styp, body)


def request(app, req_id: int) -> tuple:
    (row,) = query(app, "SELECT status, answer_msg_id, detail FROM req_track WHERE req_id = :r", r=req_id)
    return row


def sent(app) -> tuple[RequestTracker, int, int]:
    """One RQFD and one RQRD in flight (C-24: one per type)."""
    tracker = RequestTracker(app.engine, app.mailbox, app.clock)
    rqfd = tracker.register_rqfd(datetime(2026, 9, 9), datetime(2026, 9, 9, 23, 59)).req_id
    rqrd = tracker.register_rqrd("GLST").req_id
    assert sorted(tracker.track().sent) == [rqfd, rqrd]
    return tracker, rqfd, rqrd


def test_eror_naming_a_type_fails_that_request_and_frees_its_slot_c24(app, caplog):
    """C-24, D28, US-08 AC3: the EROR names RQRD -> the RQRD in flight is FAILED with the error text
    and the EROR's id, an alert is logged, the EROR ends SUCCEEDED, the RQFD is untouched, and the
    RQRD waiting behind the failed one is sent at the next round (its slot is free)."""
    tracker, rqfd, rqrd = sent(app)
    waiting = tracker.register_rqrd("AIRL").req_id
    assert tracker.track().sent == []                       # one RQRD in flight at a time
    with caplog.at_level(logging.ERROR):
        (m,) = pump(app, eror("\t<EROR><MTYP>RQRD</MTYP><DESC>table locked</DESC></EROR>\n"))
    assert status(app, m) == ("SUCCEEDED", None)
    assert request(app, rqrd) == ("FAILED", m, "EROR/MTYP=RQRD; EROR/DESC=table locked")
    assert request(app, rqfd)[0] == "SENT"
    assert any("ALERT" in r.message and f"request {rqrd}" in r.message for r in caplog.records)
    assert tracker.track().sent == [waiting]


def test_eror_echoing_a_seqn_fails_that_request_d28(app):
    """US-08 AC4 (SEQN echo preferred): the echoed SEQN picks the RQFD although two are in flight."""
    _, rqfd, rqrd = sent(app)
    (seqn,) = query(app, "SELECT seqn FROM req_track WHERE req_id = :r", r=rqfd)[0]
    (m,) = pump(app, eror(f"\t<ERRS><SEQN>{int(seqn)}</SEQN><ERRM>day not open</ERRM></ERRS>\n"))
    assert status(app, m) == ("SUCCEEDED", None)
    assert request(app, rqfd)[:2] == ("FAILED", m)
    assert request(app, rqrd)[0] == "SENT"


def test_eror_without_type_answers_the_single_request_in_flight_d28(app):
    tracker = RequestTracker(app.engine, app.mailbox, app.clock)
    req = tracker.register_rqrd("ABDG").req_id
    tracker.track()
    (m,) = pump(app, eror("\t<EROR>internal error</EROR>\n"))
    assert status(app, m) == ("SUCCEEDED", None)
    assert request(app, req) == ("FAILED", m, "EROR=internal error")


def test_eror_that_matches_nothing_is_skipped_with_an_alert_d28(app, caplog):
    """No type named and two requests in flight, or nothing in flight: SKIPPED(no_request), an alert,
    no request changed."""
    _, rqfd, rqrd = sent(app)
    with caplog.at_level(logging.ERROR):
        m1, = pump(app, eror("\t<EROR>internal error</EROR>\n"))
    assert status(app, m1) == ("SKIPPED", "no_request")
    assert [request(app, r)[0] for r in (rqfd, rqrd)] == ["SENT", "SENT"]
    assert any("ALERT" in r.message and "matches no request" in r.message for r in caplog.records)
    (detail,) = query(app, "SELECT error_detail FROM proc_state WHERE msg_id = :m", m=m1)[0]
    assert "2 request(s) are in flight" in detail


def test_eror_after_the_request_timed_out_is_skipped_c24(app, clock):
    """A late EROR for a request already TIMEOUT finds nothing in flight: the TIMEOUT stays."""
    tracker = RequestTracker(app.engine, app.mailbox, app.clock)
    req = tracker.register_rqrd("GLST").req_id
    tracker.track()
    clock.advance(31)
    assert tracker.track().timed_out == [req]
    (m,) = pump(app, eror("\t<EROR><MTYP>RQRD</MTYP></EROR>\n", styp="RQRD"))
    assert status(app, m) == ("SKIPPED", "no_request")
    assert request(app, req)[0] == "TIMEOUT"
