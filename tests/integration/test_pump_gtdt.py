"""The walking skeleton's pump over GTDT (FS §4.3, §5, §6.1; US-01, US-03, C-15)."""

from __future__ import annotations

import json

from sqlalchemy import select, text

from msgx_engine.pipeline.pump import PumpOptions
from msgx_engine.store.tables import detail_tables, flight_schd, msg_event, proc_state
from tests.builders import envelope, gtdt

flight_gate = detail_tables["flight_gate"]


def drain(app):
    return app.pump(PumpOptions()).run()


def status_of(app, msg_id):
    with app.engine.connect() as conn:
        return conn.execute(select(proc_state.c.status, proc_state.c.reason)
                            .where(proc_state.c.msg_id == msg_id)).one()


def gates(app, flid):
    with app.engine.connect() as conn:
        rows = conn.execute(select(flight_gate.c.ordinal, flight_gate.c.source_seq, flight_gate.c.gate,
                                   flight_gate.c.gtyp).where(flight_gate.c.flid == flid)
                            .order_by(flight_gate.c.ordinal)).fetchall()
    return [tuple(r) for r in rows]


def marked(app, ids):
    return {i: v is not None for i, v in app.mailbox.processed_at(ids).items()}


def test_gtdt_creates_flight_then_replaces_gates_in_input_order(app):
    """FS §4.3 example: gates G28/G33 replaced by A1 (GTNO 1) and B2 (GTNO 3): ordinal 1..n in input
    order, source_seq = GTNO; a new flight row has fday NULL; one msg and one schd event each;
    the mailbox mark is written (C-15)."""
    m1 = app.mailbox.put(gtdt("CA100", (1, "G28"), (2, "G33", "I")))
    m2 = app.mailbox.put(gtdt("CA100", (1, "A1"), (3, "B2", "I")))
    summary = drain(app)
    assert summary.processed["SUCCEEDED"] == 2
    assert status_of(app, m1) == ("SUCCEEDED", None) and status_of(app, m2) == ("SUCCEEDED", None)
    assert gates(app, "CA100") == [(1, "1", "A1", "D"), (2, "3", "B2", "I")]
    with app.engine.connect() as conn:
        row = conn.execute(select(flight_schd).where(flight_schd.c.flid == "CA100")).one()
        events = conn.execute(select(msg_event).order_by(msg_event.c.event_id)).fetchall()
    assert row.fday is None and row.state_version == 2 and row.last_message_id == m2
    assert [(e.msg_id, e.topic, e.kind) for e in events] == [
        (m1, "msg", "change"), (m1, "schd", "state"), (m2, "msg", "change"), (m2, "schd", "state")]
    assert all(e.released_at is not None for e in events)
    schd = json.loads(events[-1].payload)
    assert schd["GTDT"] == [{"GATE": "A1", "GTNO": "1", "GTYP": "D", "PGOT": "23JAN210805"},
                            {"GATE": "B2", "GTNO": "3", "GTYP": "I", "PGOT": "23JAN210805"}]
    assert marked(app, [m1, m2]) == {m1: True, m2: True}


def test_gtdt_all_zero_clears_the_gate_collection(app):
    """FS §4.3 / D7: a GTDT whose entries all carry GTNO=0 clears flight_gate; the schd payload loses
    the GTDT key (FS §6.2: cleared = key absent)."""
    app.mailbox.put(gtdt("F1", (1, "A1"), (2, "A2")))
    m2 = app.mailbox.put(gtdt("F1", (0,)))
    drain(app)
    assert status_of(app, m2) == ("SUCCEEDED", None)
    assert gates(app, "F1") == []
    with app.engine.connect() as conn:
        payload = conn.execute(select(msg_event.c.payload).where(msg_event.c.msg_id == m2,
                                                                 msg_event.c.topic == "schd")).scalar_one()
    assert "GTDT" not in json.loads(payload)
    assert marked(app, [m2]) == {m2: True}


def test_gtdt_zero_mixed_with_gates_is_dead_and_changes_nothing(app):
    """FS §5.2: GTNO=0 mixed with normal entries is an illegal structure -> DEAD(malformed), no
    partial write, the message is still marked in the mailbox (US-09)."""
    app.mailbox.put(gtdt("F2", (1, "A1")))
    bad = app.mailbox.put(gtdt("F2", (1, "B1"), (0,)))
    drain(app)
    assert status_of(app, bad) == ("DEAD", "malformed")
    assert gates(app, "F2") == [(1, "1", "A1", "D")]
    with app.engine.connect() as conn:
        assert conn.execute(select(msg_event).where(msg_event.c.msg_id == bad)).fetchall() == []
    assert marked(app, [bad]) == {bad: True}


def test_unknown_type_is_skipped_unsupported_and_never_blocks_the_head(app):
    """INV-30 / D8: a well-formed type without a handler ends SKIPPED(unsupported); the next
    message is processed after it."""
    odd = app.mailbox.put(envelope("ZZZZ", "NONE", "\t<ZZZZ/>\n"))
    ok = app.mailbox.put(gtdt("F3", (1, "C1")))
    drain(app)
    assert status_of(app, odd) == ("SKIPPED", "unsupported")
    assert status_of(app, ok) == ("SUCCEEDED", None)
    assert marked(app, [odd, ok]) == {odd: True, ok: True}


def test_same_mailbox_id_is_never_registered_twice(app):
    """US-01 AC2 / INV-2b: repeated scans (fast, late and full) register each id exactly once."""
    ids = [app.mailbox.put(gtdt(f"R{i}", (1, "A1"))) for i in range(5)]
    intake = app.pump().intake
    with app.engine.connect() as conn:
        first = intake.scan(conn, force_full=True)
        again = intake.scan(conn, force_full=True)
        third = intake.scan(conn)
        count = conn.execute(text("SELECT count(*), count(DISTINCT msg_id) FROM proc_state")).one()
    assert first.registered == 5 and again.registered == 0 and third.registered == 0
    assert tuple(count) == (5, 5)
    drain(app)
    with app.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM proc_state")).scalar_one() == 5
    assert all(marked(app, ids).values())


def test_mark_is_written_only_where_null(app):
    """C-15: DATE_PROCESSED already set by someone else is left untouched."""
    from datetime import datetime

    m = app.mailbox.put(gtdt("F4", (1, "A1")))
    earlier = datetime(2020, 1, 2, 3, 4, 5)
    with app.mailbox.engine.connect() as conn:
        conn.execute(text("UPDATE cminmsgs SET CMINMSGS_DATE_PROCESSED = :d WHERE CMINMSGS_ID = :i"),
                     {"d": earlier, "i": m})
    app.mailbox.put(gtdt("F4", (1, "A2")))
    # the first row is already marked, so intake never sees it; the second is processed and marked
    drain(app)
    assert app.mailbox.processed_at([m])[m] == earlier


def test_identity_clash_is_classified_on_both_commit_paths(app):
    """INV-9 / US-03 AC3: a second message with a bound identity has no business effect, whether
    transaction 2 is folded into transaction 1 (no post-commit step) or runs after a post-commit
    step (the projection path): same content -> SKIPPED(duplicate), other content ->
    SKIPPED(identity_conflict), dup_of names the first."""
    for split in (False, True):
        hooks = [lambda conn, msg_id, states: None] if split else []
        app.post_commit[:] = hooks
        flid = f"ID{int(split)}"
        first = app.mailbox.put(gtdt(flid, (1, "A1"), seqn=910 + split))
        dup = app.mailbox.put(gtdt(flid, (1, "A1"), seqn=910 + split))
        clash = app.mailbox.put(gtdt(flid, (1, "Z9"), seqn=910 + split))
        drain(app)
        with app.engine.connect() as conn:
            rows = {r.msg_id: (r.status, r.reason, r.dup_of) for r in conn.execute(
                select(proc_state.c.msg_id, proc_state.c.status, proc_state.c.reason, proc_state.c.dup_of)
                .where(proc_state.c.msg_id.in_([first, dup, clash])))}
            version = conn.execute(select(flight_schd.c.state_version).where(flight_schd.c.flid == flid)).scalar_one()
            evs = conn.execute(select(msg_event.c.msg_id).where(msg_event.c.flid == flid)).fetchall()
        assert rows == {first: ("SUCCEEDED", None, None), dup: ("SKIPPED", "duplicate", first),
                        clash: ("SKIPPED", "identity_conflict", first)}
        assert version == 1 and {e.msg_id for e in evs} == {first}
        assert gates(app, flid) == [(1, "1", "A1", "D")]


def test_ignore_rule_applies_before_the_structure_check(settings, clock):
    """US-04: an ignored TYPE-STYP is SKIPPED(ignored:<rule>) even when its body would be refused
    as malformed (here a FLOP block without FLID); the mark is still written."""
    from dataclasses import replace

    from msgx_engine.app import App

    app = App.from_settings(replace(settings, ignore_rules=("flop-gtdt",)), clock=clock)
    try:
        bad = app.mailbox.put(envelope("FLOP", "GTDT", "\t<FLOP><FFID>X</FFID></FLOP>\n"))
        drain(app)
        assert status_of(app, bad) == ("SKIPPED", "ignored:flop-gtdt")
        assert marked(app, [bad]) == {bad: True}
    finally:
        app.dispose()
