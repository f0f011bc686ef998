"""Dispatcher against a real Kafka-wire broker (tansu): US-07, INV-10, C-29, D12-D14, FS §8."""

from __future__ import annotations

import json
import threading
import time

import pytest
from sqlalchemy import insert, select, text

from msgx_engine.app import App
from msgx_engine.delivery.dispatcher import Dispatcher, DispatcherBusy, DispatchOptions
from msgx_engine.delivery.runner import build_dispatcher
from msgx_engine.pipeline.pump import PumpOptions
from msgx_engine.state.serialize import state_json
from msgx_engine.store.flights import FlightRepository
from msgx_engine.store.locks import DISPATCHER
from msgx_engine.store.tables import msg_event
from tests.builders import flop, gtdt


def dispatcher(app: App, clock, *, delivery_timeout_s: float = 10.0, should_stop=None, **opts) -> Dispatcher:
    return build_dispatcher(app.settings, app.engine, clock=clock, options=DispatchOptions(**opts),
                            delivery_timeout_s=delivery_timeout_s, should_stop=should_stop)


def process(app: App, *messages: str) -> None:
    for m in messages:
        app.mailbox.put(m)
    app.pump(PumpOptions(exit_when_waiting=True, idle_poll_s=0.01)).run()


def events(app: App, topic: str | None = None) -> list:
    q = select(msg_event).order_by(msg_event.c.event_id)
    if topic:
        q = q.where(msg_event.c.topic == topic)
    with app.engine.connect() as conn:
        return conn.execute(q).fetchall()


def current_json(app: App) -> dict[str, str]:
    with app.engine.connect() as conn:
        return {s.flid: state_json(s) for s in FlightRepository(conn).load_all_current()}


def test_every_released_event_arrives_in_flid_order(kapp, clock, kafka_reader):
    """US-07 AC1, INV-10, C-29, D12: each released change event is one `msg` record, key FLID,
    headers event_id/state_version/msg_id, per-FLID order kept; sent only after delivery; an
    unreleased event is never sent."""
    flids = ["D1", "D2", "D3"]
    msgs = [gtdt(f, (1, f"G{i}")) for i in range(4) for f in flids]
    process(kapp, *msgs)
    with kapp.engine.begin() as conn:  # an event transaction 2 never released
        conn.execute(insert(msg_event).values(msg_id=999999, flid="D1", topic="msg", kind="change",
                                              state_version=99, payload="{}"))
    summary = dispatcher(kapp, clock).run()
    changes = [e for e in events(kapp, "msg") if e.released_at is not None]
    assert len(changes) == 12 and summary.msg_sent == 12
    records = kafka_reader(kapp.settings.kafka_bootstrap, kapp.settings.topic_msg, 12)
    assert len(records) == 12
    by_id = {int(r.headers["event_id"]): r for r in records}
    assert set(by_id) == {e.event_id for e in changes}
    for e in changes:
        r = by_id[e.event_id]
        assert r.key == e.flid and r.value == e.payload
        assert r.headers["state_version"] == str(e.state_version) and r.headers["msg_id"] == str(e.msg_id)
    for f in flids:
        mine = [r for r in records if r.key == f]
        assert len({r.partition for r in mine}) == 1
        versions = [int(r.headers["state_version"]) for r in mine]
        assert versions == sorted(versions) == list(range(1, 5))
    rows = events(kapp, "msg")
    assert all(e.sent_at is not None for e in rows if e.released_at is not None)
    assert [e.sent_at for e in rows if e.released_at is None] == [None]


def test_schd_carries_latest_state_per_flid_per_flush(kapp, clock, kafka_reader):
    """US-07 AC2, D13, FS §8: one `schd` record per FLID per flush with the newest whole state of
    the batch; every covered event is marked sent; intermediate versions are not sent."""
    process(kapp, *[gtdt(f, (1, f"A{i}")) for i in range(3) for f in ("S1", "S2")])
    first = current_json(kapp)
    s1 = dispatcher(kapp, clock).run()
    assert (s1.schd_records, s1.schd_events) == (2, 6)
    process(kapp, gtdt("S1", (1, "B9")), gtdt("S1", (1, "C9")))
    second = current_json(kapp)
    s2 = dispatcher(kapp, clock).run()
    assert (s2.schd_records, s2.schd_events) == (1, 2)
    records = kafka_reader(kapp.settings.kafka_bootstrap, kapp.settings.topic_schd, 3)
    assert len(records) == 3
    s1_values = [r.value for r in records if r.key == "S1"]
    assert s1_values == [first["S1"], second["S1"]]
    assert [r.value for r in records if r.key == "S2"] == [first["S2"]]
    assert json.loads(second["S1"])["STATE_VERSION"] == 5
    assert all(e.sent_at is not None for e in events(kapp, "schd"))


def test_tombstone_for_deleted_flight(kapp, clock, kafka_reader):
    """D2, D13, FS §8: a deleted flight's `schd` record is the tombstone {FLID, DELETED, STATE_VERSION}."""
    process(kapp, gtdt("T1", (1, "A1")), flop("FDEL", "T1", "\t\t<FDEL></FDEL>\n"))
    dispatcher(kapp, clock).run()
    records = kafka_reader(kapp.settings.kafka_bootstrap, kapp.settings.topic_schd, 1)
    assert len(records) == 1 and records[0].key == "T1"
    assert json.loads(records[0].value) == {"DELETED": True, "FLID": "T1", "STATE_VERSION": 2}


def test_second_dispatcher_is_refused(kapp, clock):
    """US-07 (one sender at a time): while a dispatcher runs it holds a PostgreSQL advisory lock and
    a second one exits at once; after the first stops, the lock is free again (also in its pool)."""
    stop = threading.Event()
    first = dispatcher(kapp, clock, run_for_s=60.0, should_stop=stop.is_set)
    thread = threading.Thread(target=first.run)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not lock_held(kapp):
            assert time.monotonic() < deadline, "first dispatcher never took the lock"
            time.sleep(0.05)
        with pytest.raises(DispatcherBusy):
            dispatcher(kapp, clock).run()
    finally:
        stop.set()
        thread.join(30)
    assert not lock_held(kapp)
    dispatcher(kapp, clock).run()


def lock_held(app: App) -> bool:
    with app.engine.connect() as conn:
        return bool(conn.execute(text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                                      "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                                      "AND ((classid::bigint << 32) | objid::bigint) = :k"),
                                 {"k": DISPATCHER}).scalar_one())
