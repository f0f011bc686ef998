"""Requests another installation wrote to COUTMSGS are matched like this installation's own
(decision L16), on the real PostgreSQL + MariaDB: read by the pump's intake, answered through the
mailbox, never confused with a request of this installation that is being sent, and judged by
when the answer arrived after ``msgx recover``."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest
from pipeline_support import drain_now, register
from snapshot_builders import dnld, fltr, pump, query, schd, sodt
from snapshot_builders import status as msg_status

from msgx_engine.app import App
from msgx_engine.operations.recover import recover
from msgx_engine.requests.tracker import RequestTracker
from msgx_engine.sis import requests as sis
from msgx_engine.sis.times import local
from tests.integration.test_mailbox_consistency import _copy_database


def requests(app) -> list[tuple]:
    return query(app, "SELECT status, adopted, fday, start_text, end_text, seqn, sent_at FROM req_track "
                      "ORDER BY req_id")


def test_l16_an_answer_to_another_installations_request_is_applied_with_its_window(app, clock):
    """C-23, D23 (L16): a request for 9/9 08:00-12:00 that another installation wrote to COUTMSGS
    is read by the next intake pass (SENT, adopted, sent at its DTTM); the AODB's answer is applied
    with that window (the 10:00 flight it leaves out is deleted, the 07:00 one is not) and
    completes it."""
    pump(app, dnld(fltr("A07", sodt(9, hhmm="0700")), fltr("B10", sodt(9, hhmm="1000"))))
    sent = clock.now()
    app.mailbox.send_request(sis.encode("RQFD", "NONE", 777, sent, start_text="09SEP260800",
                                        end_text="09SEP261200"), "VIEWRQFD")
    clock.advance(5)
    (m,) = pump(app, schd("RESP", fltr("N11", sodt(9, hhmm="1100")),
                          dttm=local(clock.now()).strftime("%Y%m%d%H%M%S")))
    assert msg_status(app, m) == ("SUCCEEDED", None)
    assert query(app, "SELECT flid, deleted FROM flight_schd ORDER BY flid") == [
        ("A07", False), ("B10", True), ("N11", False)]
    ((status, adopted, fday, start, end, seqn, sent_at),) = requests(app)
    assert (status, adopted, str(fday), start, end, seqn, sent_at) == (
        "DONE", True, "2026-09-09", "09SEP260800", "09SEP261200", "000777", sent)


def test_l16_a_request_of_this_installation_being_sent_is_not_adopted(app, monkeypatch):
    """US-08 AC2 (L16): the COUTMSGS row of this installation's request whose sender died before
    recording it (SEQN chosen, status REGISTERED) is its own: an intake pass meanwhile adopts
    nothing, and the next send finds the row and marks the request SENT: one request, not two."""
    tracker = RequestTracker(app.engine, app.mailbox, app.clock)
    reg = tracker.register_rqfd(datetime(2026, 9, 9), None)

    def crash(self, claim, coutmsgs_id, sent_at):
        raise RuntimeError("process died after the COUTMSGS insert")

    real = RequestTracker._mark_sent
    monkeypatch.setattr(RequestTracker, "_mark_sent", crash)
    with pytest.raises(RuntimeError):
        tracker.send_pending()
    register(app)
    assert [r[:2] for r in requests(app)] == [("REGISTERED", False)]
    monkeypatch.setattr(RequestTracker, "_mark_sent", real)
    assert tracker.send_pending().recovered == [reg.req_id]
    register(app)
    assert [r[:2] for r in requests(app)] == [("SENT", False)]


def test_l16_an_answer_found_again_by_recover_is_judged_by_when_the_lost_state_finished_it(app, clock, pg_dbs):
    """US-03 AC8, C-23, D23 (L16): the state database is restored from a backup taken before a
    request for 9/9 08:00-12:00 was sent and answered; an hour later ``msgx recover`` finds the
    answer again. Its arrival is taken from its mark (when the lost state finished it), its request
    from COUTMSGS: the restored state applies it as the lost one did (before: SKIPPED no_request,
    or late_answer for the hour since)."""
    pump(app, dnld(fltr("A07", sodt(9, hhmm="0700")), fltr("B10", sodt(9, hhmm="1000"))))
    app.engine.dispose()
    backup = _copy_database(pg_dbs, app.settings.db_url)
    tracker = RequestTracker(app.engine, app.mailbox, app.clock)
    tracker.register_rqfd(datetime(2026, 9, 9, 8, 0), datetime(2026, 9, 9, 12, 0))
    tracker.send_pending()
    clock.advance(5)
    (m,) = pump(app, schd("RESP", fltr("N11", sodt(9, hhmm="1100")),
                          dttm=local(clock.now()).strftime("%Y%m%d%H%M%S")))
    assert msg_status(app, m) == ("SUCCEEDED", None)
    clock.advance(3600)
    restored = App.from_settings(replace(app.settings, db_url=backup), clock=clock)
    try:
        result = recover(restored.engine, restored.mailbox, operator="ops", reason="restored from the 08:00 dump",
                         now=clock.now(), replay=lambda: drain_now(restored), rebuild=None)
        assert result.registered == [m] and msg_status(restored, m) == ("SUCCEEDED", None)
        assert query(restored, "SELECT flid, deleted FROM flight_schd ORDER BY flid") == query(
            app, "SELECT flid, deleted FROM flight_schd ORDER BY flid") == [
            ("A07", False), ("B10", True), ("N11", False)]
        assert [r[:2] for r in requests(restored)] == [("DONE", True)]
    finally:
        restored.dispose()
