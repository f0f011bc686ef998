"""A late answer without a SEQN echo is not taken for the answer of the next request of its kind
(US-08 AC3/AC5, C-23, C-24; decisions L14, L15), reproduced through the
mailbox, the real pump and ``msgx request`` on PostgreSQL + MariaDB.

- after a request times out, the next one of its kind waits one more timeout before it is sent,
  so an answer registered in that time finds the timed-out request and is refused as late;
- an empty answer without an echo is not matched to a request of another day while a request of
  the day it may answer timed out unanswered.
"""

from __future__ import annotations

import logging
from datetime import date

import pytest
from snapshot_builders import dnld, events, fltr, pump, query, schd, sodt
from snapshot_builders import flights as stored
from snapshot_builders import status as msg_status

from msgx_engine.app import App
from msgx_engine.cli import requests as cli_requests
from msgx_engine.sis.times import local

D9, D10 = date(2026, 9, 9), date(2026, 9, 10)


@pytest.fixture
def request_cli(msgx, app, monkeypatch):
    """``msgx request ...`` in process on the test's databases and its ManualClock, so the 60 s
    timeouts pass without waiting."""
    monkeypatch.setattr(cli_requests, "open_app", lambda: App.from_settings(app.settings, clock=app.clock))

    def run(*argv: str) -> dict:
        code, doc = msgx("request", *argv)
        assert code == 0, doc
        return doc

    return run


def rqfd(request_cli, day: int, start: str = "00:00", end: str = "23:59") -> int:
    return request_cli("rqfd", "--start", f"2026-09-{day:02d} {start}", "--end", f"2026-09-{day:02d} {end}")[
        "request_id"]


def answer(clock, *records: str) -> str:
    """The AODB's SCHD RESP, stamped with the clock's time, no SEQN echo."""
    return schd("RESP", *records, dttm=local(clock.now()).strftime("%Y%m%d%H%M%S"))


def req_status(app, req_id: int) -> str:
    return query(app, "SELECT status FROM req_track WHERE req_id = :r", r=req_id)[0][0]


def detail(app, msg_id: int) -> str:
    return query(app, "SELECT error_detail FROM proc_state WHERE msg_id = :m", m=msg_id)[0][0]


def live(app) -> set[str]:
    return {flid for flid, (_, deleted, _) in stored(app).items() if not deleted}


def test_l14_a_late_narrow_answer_is_not_applied_as_the_whole_day_answer(app, clock, request_cli):
    """US-08 AC3/AC5, C-23, C-24 (L14; the issue's reproduction): a narrow RQFD (08:00-12:00) for
    9/9 is sent and times out after 60 s; the whole-day RQFD for 9/9 registered meanwhile is not
    sent for one more timeout. The AODB's late answer to the narrow request, listing only its
    10:00 flight, comes in that time: it finds the timed-out request, is SKIPPED(late_answer) and
    deletes nothing (before, the whole-day request went out at the next round and took it, deleting
    the day's flights outside 08:00-12:00). The whole-day request then goes out and its own answer
    is applied to the whole day."""
    pump(app, dnld(*(fltr(f, sodt(9, hhmm=t)) for f, t in (("A07", "0700"), ("B10", "1000"),
                                                            ("C15", "1500"), ("D20", "2000")))))
    narrow = rqfd(request_cli, 9, "08:00", "12:00")
    assert request_cli("track")["sent"] == [narrow]
    whole = rqfd(request_cli, 9)
    clock.advance(60)
    assert request_cli("track")["timed_out"] == [narrow]
    assert request_cli("track")["sent"] == []                     # waits one more timeout
    clock.advance(5)
    before = stored(app)
    (late,) = pump(app, answer(clock, fltr("B10", sodt(9, hhmm="1000"))))
    assert msg_status(app, late) == ("SKIPPED", "late_answer")
    assert f"after request {narrow} was sent" in detail(app, late)
    assert stored(app) == before and events(app, late) == []
    assert (req_status(app, narrow), req_status(app, whole)) == ("TIMEOUT", "REGISTERED")

    clock.advance(54)                                             # 59 s after the timeout
    assert request_cli("track")["sent"] == []
    clock.advance(1)
    assert request_cli("track")["sent"] == [whole]
    clock.advance(5)
    (m,) = pump(app, answer(clock, *(fltr(f, sodt(9, hhmm=t)) for f, t in (("A07", "0700"), ("C15", "1500")))))
    assert msg_status(app, m) == ("SUCCEEDED", None)
    assert live(app) == {"A07", "C15"} and req_status(app, whole) == "DONE"


def test_l15_a_late_empty_answer_does_not_wipe_another_days_window(app, clock, request_cli, caplog):
    """C-23, D23 (L15): an RQFD for 9/9 times out; the RQFD for 9/10 goes out after the rest. An
    empty answer with no echo arriving while 9/10's request is in flight may be the AODB's late
    answer for 9/9: it is SKIPPED(no_request) with an ALERT naming both requests, 9/10's flights
    stay live, its request stays SENT (before, the empty answer was applied to 9/10 and deleted
    every flight of that day). 9/10's own answer is then applied."""
    pump(app, dnld(fltr("N1", sodt(9)), fltr("N2", sodt(9, hhmm="1400"))),
         dnld(fltr("T1", sodt(10)), fltr("T2", sodt(10, hhmm="1400"))))
    first = rqfd(request_cli, 9)
    request_cli("track")
    second = rqfd(request_cli, 10)
    clock.advance(60)
    assert request_cli("track")["timed_out"] == [first]
    clock.advance(60)
    assert request_cli("track")["sent"] == [second]
    clock.advance(5)
    with caplog.at_level(logging.ERROR):
        (empty,) = pump(app, answer(clock))
    assert msg_status(app, empty) == ("SKIPPED", "no_request")
    assert f"request {first} for {D9}" in detail(app, empty) and f"request {second} for {D10}" in detail(app, empty)
    assert any(r.getMessage().startswith("ALERT") and f"request {first} for {D9}" in r.getMessage()
               for r in caplog.records)
    assert live(app) == {"N1", "N2", "T1", "T2"} and events(app, empty) == []
    assert req_status(app, second) == "SENT"

    (m,) = pump(app, answer(clock, fltr("T1", sodt(10))))
    assert msg_status(app, m) == ("SUCCEEDED", None)
    assert live(app) == {"N1", "N2", "T1"} and req_status(app, second) == "DONE"
