"""Which day a snapshot covers, and how far it deletes, through the real pump and request tracking
(PostgreSQL + MariaDB): C-23, US-06 AC2, US-08 AC5, D4 (revised), D23.

- a RESP goes to the RQFD of its own day in flight when it was registered (D4's majority-SODT rule
  on its FLTRs); a late answer for an earlier day is SKIPPED(late_answer) and writes nothing;
- its diff delete stays inside the request's window (STDB..STDE);
- an empty RESP answers the RQFD in flight; an empty DNLD is SKIPPED(empty_snapshot) with an alert;
- an unreadable RESP DTTM is DEAD(malformed).
"""

from __future__ import annotations

import logging
from datetime import date, datetime

from snapshot_builders import (
    day_package,
    dnld,
    events,
    flights,
    fltr,
    ledger,
    members,
    pump,
    query,
    schd,
    sodt,
)
from snapshot_builders import status as msg_status
from sqlalchemy import text

from msgx_engine.requests.tracker import RequestTracker

D9, D10, D11 = date(2026, 9, 9), date(2026, 9, 10), date(2026, 9, 11)
# ManualClock starts 2026-01-01 00:00 UTC (08:00 local); answers are stamped after their request.
ANSWER_DTTM = "20260101090000"


def rqfd(app, day: int, start: str = "00:00", end: str = "23:59") -> int:
    """Register an RQFD for 2026-09-<day> start..end (local) and send it: SENT (D16)."""
    tracker = RequestTracker(app.engine, app.mailbox, app.clock)
    hm = [tuple(int(x) for x in t.split(":")) for t in (start, end)]
    req = tracker.register_rqfd(datetime(2026, 9, day, *hm[0]), datetime(2026, 9, day, *hm[1]))
    assert tracker.send_pending().sent == [req.req_id]
    return req.req_id


def req_status(app, req_id: int) -> str:
    return query(app, "SELECT status FROM req_track WHERE req_id = :r", r=req_id)[0][0]


def resp(*records: str, dttm: str = ANSWER_DTTM) -> str:
    return schd("RESP", *records, dttm=dttm)


def test_c23_d23_late_answer_for_a_superseded_day_is_skipped(app, clock):
    """C-23, C-24, D16, D23 (decisions L1, L14): RQFD for 9/9 sent, then RQFD for 9/10 registered:
    it waits while 9/9's is in flight and goes out one timeout after that one timed out. The
    AODB's answer for 9/9 registered after that is SKIPPED(late_answer): 9/10's flights keep
    their versions, nothing is dated 9/9, no event, and 9/10's request stays SENT. The answer for
    9/10 is then taken and completes its request."""
    pump(app, day_package(["T1", "T2"], 10))
    first = rqfd(app, 9)
    tracker = RequestTracker(app.engine, app.mailbox, app.clock)
    second = tracker.register_rqfd(datetime(2026, 9, 10, 0, 0), datetime(2026, 9, 10, 23, 59))
    assert second.expired == () and tracker.send_pending().sent == []
    clock.advance(60)
    assert tracker.expire_timeouts() == [first]
    assert tracker.send_pending().sent == []
    clock.advance(60)
    assert tracker.send_pending().sent == [second.req_id]
    before = (flights(app), members(app), ledger(app))

    (late,) = pump(app, resp(fltr("N1", sodt(9)), fltr("N2", sodt(9))))
    assert msg_status(app, late) == ("SKIPPED", "late_answer")
    assert f"after request {first} was sent" in query(
        app, "SELECT error_detail FROM proc_state WHERE msg_id = :m", m=late)[0][0]
    assert (flights(app), members(app), ledger(app)) == before
    assert events(app, late) == []
    assert (req_status(app, first), req_status(app, second.req_id)) == ("TIMEOUT", "SENT")

    (answer,) = pump(app, resp(fltr("T1", sodt(10))))
    assert msg_status(app, answer) == ("SUCCEEDED", None)
    assert flights(app) == {"T1": (D10, False, 2), "T2": (D10, True, 2)}
    assert req_status(app, second.req_id) == "DONE"


def test_d23_partial_window_deletes_only_inside_it(app):
    """D23 (the issue's 11 Sep 12:00-18:00 case): the answer lists the 15:00 flight; the 16:00
    member missing from it is deleted, the 08:00 member and the 20:00 one outside the window are
    kept and stay members; the window's request is DONE."""
    pump(app, dnld(*(fltr(f, sodt(11, hhmm=t)) for f, t in (("A08", "0800"), ("B15", "1500"),
                                                             ("C16", "1600"), ("D20", "2000")))))
    req = rqfd(app, 11, "12:00", "18:00")
    (m,) = pump(app, resp(fltr("B15", sodt(11, hhmm="1500"), stnd="505")))     # B15 changed: a new version
    assert msg_status(app, m) == ("SUCCEEDED", None)
    assert flights(app) == {"A08": (D11, False, 1), "B15": (D11, False, 2), "C16": (D11, True, 2),
                            "D20": (D11, False, 1)}
    assert members(app)[D11] == {"A08", "B15", "D20"}
    assert [(e[0], e[2]) for e in events(app, m)] == [("B15", "state"), ("C16", "tombstone")]
    assert req_status(app, req) == "DONE"


def test_d23_window_bounds_are_inclusive_and_a_member_without_sodt_is_outside(app):
    """D23: SODT equal to STDB or STDE is inside the window; a member whose SODT is unreadable
    is outside any window, so a RESP never deletes it."""
    pump(app, dnld(fltr("AT12", sodt(11, hhmm="1200")), fltr("AT18", sodt(11, hhmm="1800")),
                   fltr("KEEP", sodt(11, hhmm="1500"))))
    with app.engine.begin() as conn:
        conn.execute(text("UPDATE flight_schd SET sodt = 'garbage' WHERE flid = 'KEEP'"))
    rqfd(app, 11, "12:00", "18:00")
    (m,) = pump(app, resp(fltr("NEW", sodt(11, hhmm="1300"))))
    assert msg_status(app, m) == ("SUCCEEDED", None)
    assert {f: v[1] for f, v in flights(app).items()} == {"AT12": True, "AT18": True, "KEEP": False,
                                                          "NEW": False}


def test_d23_empty_resp_answers_the_single_sent_rqfd(app):
    """D23: an empty RESP answers the one SENT RQFD: the members inside its window are deleted,
    the request is DONE."""
    pump(app, dnld(fltr("A", sodt(9, hhmm="0700")), fltr("B", sodt(9, hhmm="1300"))))
    req = rqfd(app, 9, "12:00", "23:59")
    (m,) = pump(app, resp())
    assert msg_status(app, m) == ("SUCCEEDED", None)
    assert {f: v[1] for f, v in flights(app).items()} == {"A": False, "B": True}
    assert req_status(app, req) == "DONE"


def test_c23_resp_with_an_unreadable_dttm_is_dead_malformed(app):
    """C-23, D23: an answer whose META DTTM is not a time cannot be matched to a request:
    DEAD(malformed), nothing written, the request stays SENT."""
    pump(app, day_package(["A"], 9))
    req = rqfd(app, 9)
    before = (flights(app), members(app), ledger(app))
    (m,) = pump(app, resp(fltr("B", sodt(9)), dttm="20261399250000"))
    assert msg_status(app, m) == ("DEAD", "malformed")
    assert (flights(app), members(app), ledger(app)) == before
    assert req_status(app, req) == "SENT"


def test_d4_empty_dnld_is_skipped_with_an_alert_and_deletes_nothing(app, caplog):
    """D4 (revised): an empty DNLD has no day: SKIPPED(empty_snapshot), nothing deleted (the 12 Sep
    reproduction), no event, an ALERT logged; it is still marked processed."""
    pump(app, day_package(["A", "B"], 12))
    before = (flights(app), members(app), ledger(app))
    with caplog.at_level(logging.ERROR):
        (m,) = pump(app, dnld(dttm="20260912060000"))
    assert msg_status(app, m) == ("SKIPPED", "empty_snapshot")
    assert (flights(app), members(app), ledger(app)) == before
    assert events(app, m) == []
    assert any(r.levelno == logging.ERROR and r.getMessage().startswith("ALERT") and "empty" in r.getMessage()
               for r in caplog.records)
    assert app.mailbox.processed_at([m])[m] is not None
