"""Dead outbox events with an operator path (OPS-2, US-07 AC1, C-29) on a real Kafka-wire broker.

An event dies for real: the dispatcher sends it to a topic that cannot exist (the broker refuses
the name), with an attempt limit of one; a broker that cannot be reached never kills an event
(F16). While it is dead the later events of its flight wait behind it (never overtake it), other
flights flow; ``msgx outbox`` lists it; ``msgx outbox --apply`` revives it, audited; the
dispatcher then delivers it first and the later event after it, on tansu.
"""

from __future__ import annotations

from sqlalchemy import select

from msgx_engine.app import App
from msgx_engine.delivery.runner import build_dispatcher
from msgx_engine.pipeline.pump import PumpOptions
from msgx_engine.store import audit
from msgx_engine.store.tables import msg_event
from tests.builders import gtdt
from tests.refused_events import kill_events_for_real


def process(app: App, *messages: str) -> list[int]:
    ids = [app.mailbox.put(m) for m in messages]
    app.pump(PumpOptions(exit_when_waiting=True, idle_poll_s=0.01)).run()
    return ids


def events(app: App, flid: str | None = None) -> list:
    q = select(msg_event).order_by(msg_event.c.event_id)
    if flid:
        q = q.where(msg_event.c.flid == flid)
    with app.engine.connect() as conn:
        return conn.execute(q).fetchall()


def deliver(app: App, clock) -> None:
    build_dispatcher(app.settings, app.engine, clock=clock, delivery_timeout_s=10.0).run()


def test_dead_event_is_listed_revived_audited_and_delivered_before_its_flights_later_event(
        kapp, clock, cli_run, kafka_reader):
    """OPS-2, US-07 AC1, C-29: flight OB1's events die (msg and schd); a later message of OB1
    is held behind them while flight OB2's event is delivered; the preview lists each dead event
    (event id, topic, FLID, mailbox id, attempts, error excerpt, how many wait behind it); the
    revive is audited; then `msg` carries OB1's dead change first and the later one after it,
    and `schd` OB1's newest state."""
    [first] = process(kapp, gtdt("OB1", (1, "A1")))
    kill_events_for_real(kapp.engine, clock, kapp.settings.kafka_bootstrap)
    dead = events(kapp, "OB1")
    assert len(dead) == 2 and all(e.dead_at is not None and e.sent_at is None and e.send_attempts == 1
                                  for e in dead)
    [later, _] = process(kapp, gtdt("OB1", (1, "A2")), gtdt("OB2", (1, "B1")))
    deliver(kapp, clock)
    held = [e for e in events(kapp, "OB1") if e.msg_id == later]
    assert len(held) == 2 and all(e.sent_at is None and e.send_attempts == 0 for e in held), "overtook"
    assert all(e.sent_at is not None for e in events(kapp, "OB2"))

    code, out, err = cli_run("outbox")
    assert code == 0, err
    for e in dead:
        assert (f"event {e.event_id}: topic {e.topic}, flight OB1, mailbox id {first}, 1 attempt(s)" in out
                and "1 later event(s) of this flight wait behind it" in out), out
    assert "last error: " in out and "2 dead event(s)" in out and "msgx outbox --apply --ids" in out
    code, out, err = cli_run("outbox", "--json")
    assert code == 0 and '"dead_total": 2' in out

    dead_ids = [str(e.event_id) for e in dead]
    code, out, err = cli_run("outbox", "--apply", "--ids", *dead_ids, "--operator", "carol", "--reason", "broker back")
    assert code == 0, err
    assert f"revived event {dead[0].event_id}" in out and "revived 2 dead event(s)" in out
    revived = events(kapp, "OB1")[:2]
    assert all(e.dead_at is None and e.send_attempts == 0 and e.sent_at is None for e in revived)
    with kapp.engine.connect() as conn:
        [entry] = audit.entries(conn, action="outbox_revive")
        items = audit.items_of(conn, entry.audit_id)
    assert (entry.operator, entry.reason, entry.outcome["revived"]) == ("carol", "broker back", 2)
    assert [(i.msg_id, i.before_status, i.after_status) for i in items] == [(first, "event DEAD", "event PENDING")]
    assert all(eid in items[0].result for eid in dead_ids)

    deliver(kapp, clock)
    assert all(e.sent_at is not None for e in events(kapp, "OB1"))
    msg = [r for r in kafka_reader(kapp.settings.kafka_bootstrap, kapp.settings.topic_msg, 3) if r.key == "OB1"]
    changes = [e for e in events(kapp, "OB1") if e.topic == "msg"]
    assert [r.headers["event_id"] for r in msg] == [str(e.event_id) for e in changes]
    assert [r.headers["msg_id"] for r in msg] == [str(first), str(later)]
    schd = [r for r in kafka_reader(kapp.settings.kafka_bootstrap, kapp.settings.topic_schd, 2) if r.key == "OB1"]
    assert [r.headers["state_version"] for r in schd] == ["2"]


def test_outbox_apply_refuses_when_nothing_matches_or_arguments_are_missing(kapp, clock, cli_run):
    """OPS-2: --apply without operator/reason or without a choice of events, an id that is not a
    dead event, and --all-dead with no dead event are refused (exit 2) and revive nothing."""
    process(kapp, gtdt("OB3", (1, "A1")))
    kill_events_for_real(kapp.engine, clock, kapp.settings.kafka_bootstrap)
    dead_msg = events(kapp, "OB3")[0]
    assert cli_run("outbox", "--apply", "--ids", str(dead_msg.event_id), "--reason", "x")[0] == 2
    assert cli_run("outbox", "--apply", "--operator", "x", "--reason", "y")[0] == 2
    assert cli_run("outbox", "--apply", "--all-dead", "--ids", "1", "--operator", "x", "--reason", "y")[0] == 2
    assert cli_run("outbox", "--ids", str(dead_msg.event_id))[0] == 2
    code, _, err = cli_run("outbox", "--apply", "--ids", str(dead_msg.event_id), "999999", "--operator", "x",
                       "--reason", "y")
    assert code == 2 and "not dead events" in err and "999999" in err
    assert all(e.dead_at is not None for e in events(kapp, "OB3"))
    code, out, err = cli_run("outbox", "--apply", "--all-dead", "--operator", "x", "--reason", "y")
    assert code == 0, err
    assert "revived 2 dead event(s)" in out
    code, _, err = cli_run("outbox", "--apply", "--all-dead", "--operator", "x", "--reason", "again")
    assert code == 2 and "no dead event matches" in err
    with kapp.engine.connect() as conn:
        outcomes = [e.outcome["revived"] for e in audit.entries(conn, action="outbox_revive")]
    assert outcomes == [0, 2, 0]
