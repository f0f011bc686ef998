"""Every status path of the protocol (DESIGN §2).

Each test asserts proc_state, the flight tables, msg_event and the mailbox mark. Time moves only
through the ManualClock (no sleeps).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from sqlalchemy import delete

from msgx_engine.app import App
from msgx_engine.mailbox.tables import cminmsgs
from msgx_engine.pipeline.pump import PumpOptions
from msgx_engine.state.serialize import state_document
from msgx_engine.store.flights import FlightRepository
from tests.builders import envelope, gtdt
from tests.pipeline_support import (
    assert_no_effect,
    drain_now,
    events,
    flight_count,
    gates,
    history,
    is_marked,
    proc,
    register,
    todo,
)


def test_succeeded_writes_state_events_status_and_mark(app, clock):
    """US-03 AC6, INV-17b, US-09 AC1/AC3, C-15: SUCCEEDED with applied_at, identity bound, payload
    hash, stable created_at; gates written; two events released; todo DONE; mark written."""
    created = clock.now()
    m = app.mailbox.put(gtdt("S1", (1, "A1"), (2, "B2")))
    register(app)
    clock.advance(3)
    drain_now(app)
    row = proc(app, m)
    assert (row.status, row.reason, row.attempts) == ("SUCCEEDED", None, 0)
    assert row.created_at == created and row.applied_at == created + timedelta(seconds=3)
    assert row.identity_key.startswith("AODB|FLOP|GTDT|") and len(row.payload_hash) == 64
    assert row.terminal_at is not None and row.dup_of is None
    assert gates(app, "S1") == [(1, "A1"), (2, "B2")]
    ev = events(app, m)
    assert [(e.topic, e.kind) for e in ev] == [("msg", "change"), ("schd", "state")]
    assert all(e.released_at is not None for e in ev)
    assert todo(app, m).status == "DONE" and is_marked(app, m)
    assert history(app, m) == [("SUCCEEDED", None, None, None)]


@pytest.mark.parametrize("body,reason", [
    ("this is not xml", "malformed"),
    ('<?xml version="1.0"?><MSG><META><SNDR>AODB</SNDR></META></MSG>', "malformed"),
    ('<!DOCTYPE x [<!ENTITY a "b">]><MSG/>', "forbidden"),
])
def test_undecodable_goes_dead_without_effect_and_is_marked(app, body, reason):
    """US-03 AC2/AC4, INV-30: MALFORMED goes DEAD at once (no retry), no business effect, still marked."""
    m = app.mailbox.put(body)
    drain_now(app)
    row = proc(app, m)
    assert (row.status, row.reason, row.error_class, row.attempts) == ("DEAD", reason, "MALFORMED", 0)
    assert row.error_detail
    assert flight_count(app) == 0 and events(app, m) == []
    assert is_marked(app, m)


def test_oversize_goes_dead(settings, clock):
    """US-03 AC2: a body over the size limit is DEAD(oversize), marked, no effect."""
    app = App.from_settings(replace(settings, max_body_bytes=200), clock=clock)
    try:
        m = app.mailbox.put(gtdt("S2", (1, "A1")))
        drain_now(app)
        assert (proc(app, m).status, proc(app, m).reason) == ("DEAD", "oversize")
        assert flight_count(app) == 0 and is_marked(app, m)
    finally:
        app.dispose()


@pytest.mark.parametrize("mtype,styp,rule", [("LDM", "NONE", "LDM-*"), ("RSTA", "UPD", "RSTA-*"),
                                             ("ldm", "x", "LDM-*")])
def test_default_ignore_rules_skip_before_identity(app, mtype, styp, rule):
    """US-04 AC1/AC2/AC3, D9: default LDM-*/RSTA-*, case-insensitive; SKIPPED(ignored:<rule>) before
    identity binding (no identity_key), no effect, marked."""
    m = app.mailbox.put(envelope(mtype, styp, "<X>1</X>\n"))
    drain_now(app)
    row = proc(app, m)
    assert (row.status, row.reason, row.identity_key) == ("SKIPPED", f"ignored:{rule}", None)
    assert_no_effect(app, m)
    assert is_marked(app, m)


def test_configured_ignore_rule(settings, clock):
    """US-04: the rule list is configurable; a FLOP-GTDT rule ignores GTDT, and LDM is no longer ignored."""
    app = App.from_settings(replace(settings, ignore_rules=("flop-gtdt",)), clock=clock)
    try:
        a = app.mailbox.put(gtdt("S3", (1, "A1")))
        b = app.mailbox.put(envelope("LDM", "NONE", "<X>1</X>\n"))
        drain_now(app)
        assert (proc(app, a).status, proc(app, a).reason) == ("SKIPPED", "ignored:flop-gtdt")
        assert (proc(app, b).status, proc(app, b).reason) == ("SKIPPED", "unsupported")
        assert gates(app, "S3") == [] and is_marked(app, a) and is_marked(app, b)
    finally:
        app.dispose()




def test_duplicate_and_identity_conflict(app, caplog):
    """US-03 AC3, INV-9: same identity + same content (new DTTM) -> SKIPPED(duplicate, dup_of);
    different content -> SKIPPED(identity_conflict, dup_of) with an ALERT log; neither has effect;
    all marked."""
    first = app.mailbox.put(gtdt("S4", (1, "A1"), seqn=777001))
    dup = app.mailbox.put(gtdt("S4", (1, "A1"), seqn=777001, dttm="20210123060000"))
    clash = app.mailbox.put(gtdt("S4", (1, "Z9"), seqn=777001))
    with caplog.at_level(logging.ERROR):
        drain_now(app)
    assert proc(app, first).status == "SUCCEEDED"
    assert (proc(app, dup).status, proc(app, dup).reason, proc(app, dup).dup_of) == ("SKIPPED", "duplicate", first)
    c = proc(app, clash)
    assert (c.status, c.reason, c.dup_of) == ("SKIPPED", "identity_conflict", first)
    assert "ALERT identity conflict" in caplog.text
    assert gates(app, "S4") == [(1, "A1")]
    assert_no_effect(app, dup)
    assert_no_effect(app, clash)
    assert all(is_marked(app, i) for i in (first, dup, clash))


def test_public_samples_sharing_an_identity_do_not_crash(app, samples, caplog):
    """US-03 AC3, INV-9: APPT/01 (sets APPT) and APPT/02 (clears it) share the identity
    AODB|FLOP|APPT|1243 with different content. The first creates flight 15 (unknown FLID, FS §5.4)
    with APPT 12DEC031350 and publishes it; the second is SKIPPED(identity_conflict) against the
    first, with one ALERT and no effect, so the clear it carries is not applied. Never an error."""
    a = app.mailbox.put((samples / "APPT" / "01_APPT.xml").read_text())
    b = app.mailbox.put((samples / "APPT" / "02_APPT.xml").read_text())
    with caplog.at_level(logging.ERROR):
        drain_now(app)
    first, second = proc(app, a), proc(app, b)
    assert (first.status, first.reason, first.dup_of) == ("SUCCEEDED", None, None)
    assert first.identity_key == "AODB|FLOP|APPT|1243"
    assert (second.status, second.reason, second.dup_of) == ("SKIPPED", "identity_conflict", a)
    assert "ALERT identity conflict" in caplog.text
    with app.engine.connect() as conn:
        flight = FlightRepository(conn).load(["15"])["15"]
    doc = state_document(flight)
    assert (doc["APPT"], doc["FFID"], doc["STATE_VERSION"]) == ("12DEC031350", "CA-CA101-D-12DEC031345-D", 1)
    assert (flight.deleted, flight.last_message_id) == (False, a)
    assert [(e.topic, e.kind) for e in events(app, a)] == [("msg", "change"), ("schd", "state")]
    assert_no_effect(app, b)
    assert is_marked(app, a) and is_marked(app, b)


def test_unsupported_type_is_skipped_not_retried(app):
    """D8, INV-30: a well-formed unknown TYPE is SKIPPED(unsupported) at once and never blocks the head."""
    m = app.mailbox.put(envelope("QQQ", "NONE", "<QQQ>1</QQQ>\n"))
    after = app.mailbox.put(gtdt("S5", (1, "A1")))
    drain_now(app)
    assert (proc(app, m).status, proc(app, m).reason, proc(app, m).attempts) == ("SKIPPED", "unsupported", 0)
    assert proc(app, after).status == "SUCCEEDED"
    assert_no_effect(app, m)
    assert is_marked(app, m)


def test_c12_d24_vanished_row_stays_open_at_the_head_with_one_alert(app, clock, caplog):
    """C-12, D24: a registered row that disappears from the mailbox is not a verdict on the
    message: it stays open at the head (FAILED, SOURCE_MISSING, no attempt used, no todo, not
    DEAD), one ALERT when it is first found missing, and the next id does not pass it. It is looked
    for again every 30 s (no second alert); a drain stops instead of waiting forever; when the row
    is back (an operator restored it) it is processed like any other."""
    body = gtdt("S6", (1, "A1"))
    m = app.mailbox.put(body)
    n = app.mailbox.put(gtdt("S7", (1, "B1")))
    register(app)
    with app.mailbox.engine.connect() as mconn:
        mconn.execute(delete(cminmsgs).where(cminmsgs.c.CMINMSGS_ID == m))
    with caplog.at_level(logging.ERROR):
        drain_now(app)
        row = proc(app, m)
        assert (row.status, row.reason, row.error_class, row.attempts) == ("FAILED", None, "SOURCE_MISSING", 0)
        assert row.next_attempt_at == clock.now() + timedelta(seconds=30)
        assert proc(app, n).status == "PENDING" and gates(app, "S7") == []
        assert todo(app, m) is None
        clock.advance(30)
        summary = app.pump(PumpOptions(idle_poll_s=0.01)).run()      # a plain drain returns
        assert not summary.processed
        clock.advance(3600)
        drain_now(app)
    assert (proc(app, m).status, proc(app, m).attempts, proc(app, n).status) == ("FAILED", 0, "PENDING")
    alerts = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ALERT")]
    assert len(alerts) == 1 and f"mailbox id {m}" in alerts[0] and "vanished" in alerts[0]
    with app.mailbox.engine.begin() as mconn:
        mconn.execute(cminmsgs.insert().values(CMINMSGS_ID=m, CMINMSGS_CLOB_MSG=body, CMINMSGS_STATUS="VALID",
                                               CMINMSGS_DATE_RECEIVED=datetime(2026, 1, 1)))
    clock.advance(30)
    drain_now(app)
    assert (proc(app, m).status, proc(app, n).status) == ("SUCCEEDED", "SUCCEEDED")
    assert gates(app, "S6") == [(1, "A1")] and is_marked(app, m)
