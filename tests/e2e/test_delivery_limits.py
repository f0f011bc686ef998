"""Delivery robustness on real tansu brokers: compressed records, one
undeliverable record holding back only its own flight (per-FLID order, C-29), and a broker freeze
shorter than the delivery timeout delivering each record once (INV-10)."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
import uuid
from collections import Counter
from dataclasses import replace

import pytest
from sqlalchemy import insert, select

from msgx_engine.app import App
from msgx_engine.clock import SystemClock
from msgx_engine.delivery.dispatcher import Dispatcher, DispatchOptions
from msgx_engine.delivery.producer import KafkaSink, Record
from msgx_engine.pipeline.pump import PumpOptions
from msgx_engine.store.outbox import SendPolicy
from msgx_engine.store.tables import msg_event
from tests.builders import gtdt
from tests.recovery import recovery

UNDELIVERABLE = "x" * 1_200_000   # over the producer's 1 MB message.max.bytes: refused locally, every time


def make_app(settings, clock, bootstrap: str) -> App:
    tag = uuid.uuid4().hex[:8]
    return App.from_settings(replace(settings, kafka_bootstrap=bootstrap, topic_msg=f"msg_{tag}",
                                     topic_schd=f"schd_{tag}"), clock=clock)


def msg_rows(app: App) -> list:
    with app.engine.connect() as conn:
        return conn.execute(select(msg_event).where(msg_event.c.topic == "msg")
                            .order_by(msg_event.c.event_id)).fetchall()


def release(app: App, clock, *events: tuple[str, str]) -> None:
    """Released ``msg`` events (flid, payload), as transaction 2 leaves them."""
    with app.engine.begin() as conn:
        conn.execute(insert(msg_event), [
            {"msg_id": 100 + i, "flid": flid, "topic": "msg", "kind": "change", "state_version": 1,
             "payload": payload, "released_at": clock.now()} for i, (flid, payload) in enumerate(events)])


def wait_for(what: str, cond, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_compressed_records_are_produced_and_consumed_intact(kafka_bootstrap, kafka_reader, compression):
    """Item 8(a): the producer compresses (`compression.type`, MSGX_KAFKA_COMPRESSION, default
    lz4); tansu takes lz4 and zstd batches and a consumer reads every record back byte-identical,
    keys and headers included."""
    topic = f"comp_{compression}_{uuid.uuid4().hex[:8]}"
    sink = KafkaSink(kafka_bootstrap, delivery_timeout_s=30.0, compression=compression)
    assert sink.config["compression.type"] == compression
    records = [Record(topic, f"F{i % 3}", json.dumps({"n": i, "pad": "ab" * 20_000}), i,
                      (("event_id", str(i)),)) for i in range(12)]
    try:
        result = sink.send(records)
    finally:
        sink.close()
    assert result.delivered == list(range(12)) and result.fatal is None
    got = kafka_reader(kafka_bootstrap, topic, 12)
    assert sorted((r.headers["event_id"], r.key, r.value) for r in got) == sorted(
        (str(r.event_id), r.key, r.value) for r in records)


def test_undeliverable_record_holds_back_only_its_own_flight(settings, clock, kafka_bootstrap, kafka_reader, caplog):
    """Item 8(c), C-29, US-07 AC2/AC6: flight A's head record is undeliverable (refused by the
    producer as too large). Flight B's events, before and after it, are delivered at once; A's
    later event waits behind A's head (never tried while the head backs off, even in the same
    batch); the head backs off, stays visible with its error, turns DEAD with an alert after the
    attempt limit, and A's later event still waits: a dead event is never overtaken by its flight
    (OPS-2; an operator revives it with `msgx outbox --apply`, tests/e2e/test_outbox_revive.py)."""
    app = make_app(settings, clock, kafka_bootstrap)
    release(app, clock, ("A", UNDELIVERABLE), ("B", '{"b":1}'), ("A", '{"a":2}'), ("B", '{"b":2}'))
    sink = KafkaSink(kafka_bootstrap, delivery_timeout_s=30.0)
    policy = SendPolicy(backoff_base_s=10, backoff_cap_s=60, max_attempts=3)

    def run() -> None:
        Dispatcher(app.engine, sink, clock, topic_msg=app.settings.topic_msg, topic_schd=app.settings.topic_schd,
                   options=DispatchOptions(policy=policy)).run()

    run()
    a1, b1, a2, b2 = msg_rows(app)
    assert a1.send_attempts == 1 and "refused" in a1.send_error and a1.sent_at is None
    assert a2.sent_at is None and a2.send_attempts == 0          # held: same flight, behind its head
    assert b1.sent_at is not None and b2.sent_at is not None     # the other flight is not held back
    release(app, clock, ("B", '{"b":3}'))
    run()                                                        # A still in backoff: B keeps flowing
    rows = msg_rows(app)
    assert rows[0].send_attempts == 1 and rows[2].sent_at is None and rows[2].send_attempts == 0
    assert rows[4].sent_at is not None
    got = kafka_reader(kafka_bootstrap, app.settings.topic_msg, 3)
    assert [r.key for r in got] == ["B", "B", "B"]
    assert [r.headers["event_id"] for r in got] == [str(rows[i].event_id) for i in (1, 3, 4)]
    with caplog.at_level(logging.ERROR):
        for _ in range(2):
            clock.advance(61)
            run()
    a1, _, a2, _, _ = msg_rows(app)
    assert a1.send_attempts == 3 and a1.dead_at is not None and a1.sent_at is None
    assert any("ALERT dead event" in r.message and str(a1.event_id) in r.message for r in caplog.records)
    assert a2.sent_at is None and a2.send_attempts == 0
    release(app, clock, ("B", '{"b":4}'))
    run()                                                        # A dead: still held; B flows
    a1, _, a2, _, _, b4 = msg_rows(app)
    assert a2.sent_at is None and a2.send_attempts == 0 and b4.sent_at is not None
    got = kafka_reader(kafka_bootstrap, app.settings.topic_msg, 4)
    assert [r.key for r in got] == ["B", "B", "B", "B"]
    app.dispose()


def freeze_run(settings, clock, broker, *, delivery_timeout_s: float, freeze_s: float) -> tuple[App, list, object]:
    """Deliver one event, freeze the broker (SIGSTOP) for ``freeze_s`` while three more are
    released and sent, thaw it (SIGCONT), and wait until every event is marked sent."""
    app = make_app(settings, clock, broker.bootstrap)
    stop = threading.Event()
    d = Dispatcher(app.engine, KafkaSink(broker.bootstrap, delivery_timeout_s=delivery_timeout_s), SystemClock(),
                   topic_msg=app.settings.topic_msg, topic_schd=app.settings.topic_schd,
                   options=DispatchOptions(run_for_s=600, poll_s=0.05, schd_flush_s=0.5,
                                           policy=SendPolicy(backoff_base_s=0.5, backoff_cap_s=1.0)),
                   should_stop=stop.is_set)
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("summary", d.run()))
    thread.start()
    pid = broker.proc.pid
    try:
        app.mailbox.put(gtdt("F0", (1, "A0")))
        app.pump(PumpOptions(exit_when_waiting=True, idle_poll_s=0.01)).run()
        wait_for("the first event delivered", lambda: all(r.sent_at for r in msg_rows(app)))
        os.kill(pid, signal.SIGSTOP)
        try:
            for i in range(1, 4):
                app.mailbox.put(gtdt(f"F{i}", (1, f"A{i}")))
            app.pump(PumpOptions(exit_when_waiting=True, idle_poll_s=0.01)).run()
            time.sleep(freeze_s)          # the fault: how long the broker stays frozen
        finally:
            os.kill(pid, signal.SIGCONT)
            thawed = time.monotonic()
        wait_for("every event delivered after the thaw", lambda: all(r.sent_at for r in msg_rows(app)),
                 timeout_s=delivery_timeout_s + 120)
        recovery(f"broker frozen {freeze_s:.0f} s under a {delivery_timeout_s:.0f} s delivery timeout", thawed,
                 "the thaw -> last event delivered")
    finally:
        stop.set()
        thread.join(delivery_timeout_s + 60)
    return app, msg_rows(app), result.get("summary")


def test_broker_freeze_shorter_than_delivery_timeout_delivers_each_record_once(settings, clock, own_tansu,
                                                                                kafka_reader):
    """Item 9, INV-10: a broker frozen for 12 s under a 60 s delivery timeout: the producer waits it
    out and the broker takes each record once; nothing failed, nothing resent, no producer rebuild,
    every event id on the topic exactly once."""
    app, rows, summary = freeze_run(settings, clock, own_tansu, delivery_timeout_s=60.0, freeze_s=12.0)
    assert len(rows) == 4 and all(r.send_attempts == 0 for r in rows)
    assert summary is not None and summary.producer_rebuilds == 0 and summary.failed == 0
    got = kafka_reader(own_tansu.bootstrap, app.settings.topic_msg, 4)
    assert Counter(r.headers["event_id"] for r in got) == Counter(str(r.event_id) for r in rows)
    app.dispose()


def test_broker_freeze_longer_than_delivery_timeout_fails_the_send_and_resends(settings, clock, own_tansu,
                                                                               kafka_reader):
    """Item 9 (why the timeout is long): the same 12 s freeze under a 5 s delivery timeout makes the
    send fail and the events go out again after the thaw (at least once: nothing lost, duplicates
    possible, which consumers drop by event_id). This is the path a freeze longer than
    MSGX_KAFKA_DELIVERY_TIMEOUT takes. After the timeout tansu answered every later record with
    PRODUCER_FENCED: the sink now rebuilds its producer on such a report, so nothing goes DEAD."""
    app, rows, summary = freeze_run(settings, clock, own_tansu, delivery_timeout_s=5.0, freeze_s=12.0)
    assert len(rows) == 4 and any(r.send_attempts >= 1 for r in rows[1:])
    assert all(r.dead_at is None for r in rows)
    assert summary is not None and summary.failed >= 1 and summary.producer_rebuilds >= 1
    got = kafka_reader(own_tansu.bootstrap, app.settings.topic_msg, 4)
    assert {r.headers["event_id"] for r in got} == {str(r.event_id) for r in rows}
    app.dispose()
