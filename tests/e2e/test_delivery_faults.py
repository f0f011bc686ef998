"""Delivery under failure, against real tansu brokers: US-07 AC1/AC3/AC5/AC6, INV-10, C-29, D14."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

from sqlalchemy import select

from msgx_engine.app import App
from msgx_engine.clock import SystemClock
from msgx_engine.delivery.dispatcher import Dispatcher, DispatchOptions
from msgx_engine.delivery.producer import KafkaSink
from msgx_engine.pipeline.pump import PumpOptions
from msgx_engine.store.outbox import SendPolicy
from msgx_engine.store.tables import msg_event
from tests.builders import gtdt

MSGX = str(Path(sys.executable).parent / "msgx")


def make_app(settings, clock, bootstrap: str) -> App:
    tag = uuid.uuid4().hex[:8]
    return App.from_settings(replace(settings, kafka_bootstrap=bootstrap, topic_msg=f"msg_{tag}",
                                     topic_schd=f"schd_{tag}"), clock=clock)


def process(app: App, *messages: str) -> None:
    for m in messages:
        app.mailbox.put(m)
    app.pump(PumpOptions(exit_when_waiting=True, idle_poll_s=0.01)).run()


def rows(app: App, topic: str = "msg") -> list:
    with app.engine.connect() as conn:
        return conn.execute(select(msg_event).where(msg_event.c.topic == topic,
                                                    msg_event.c.released_at.is_not(None))
                            .order_by(msg_event.c.event_id)).fetchall()


def wait_for(what: str, cond, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)




def test_broker_outage_nothing_marked_then_all_delivered_in_order(settings, clock, own_tansu, kafka_reader):
    """US-07 AC1/AC6, INV-10, C-29, D14: with the broker down nothing is marked sent (events back
    off, errors visible); when it is back (empty, as a wiped broker) the same dispatcher rebuilds its
    producer after the fatal error and delivers every event, per-FLID order kept, same event_id."""
    app = make_app(settings, clock, own_tansu.bootstrap)
    stop = threading.Event()
    d = Dispatcher(app.engine, KafkaSink(own_tansu.bootstrap, delivery_timeout_s=2.0), SystemClock(),
                   topic_msg=app.settings.topic_msg, topic_schd=app.settings.topic_schd,
                   options=DispatchOptions(run_for_s=120, poll_s=0.05, schd_flush_s=0.5,
                                           policy=SendPolicy(backoff_base_s=0.2, backoff_cap_s=0.5)),
                   should_stop=stop.is_set)
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("summary", d.run()))
    thread.start()
    try:
        process(app, gtdt("B1", (1, "A1")), gtdt("B2", (1, "A2")))
        assert len(kafka_reader(own_tansu.bootstrap, app.settings.topic_msg, 2)) == 2
        wait_for("first events marked", lambda: all(r.sent_at for r in rows(app)))
        own_tansu.stop()
        process(app, *[gtdt(f, (1, f"X{i}")) for i in range(3) for f in ("B1", "B2")])
        wait_for("failed attempts", lambda: all(r.send_attempts >= 2 for r in rows(app)[2:]))
        later = rows(app)[2:]
        assert len(later) == 6
        assert all(r.sent_at is None and r.send_error for r in later)
        own_tansu.start()
        wait_for("delivery after the outage", lambda: all(r.sent_at for r in rows(app) + rows(app, "schd")))
    finally:
        stop.set()
        thread.join(60)
    assert result["summary"].producer_rebuilds >= 1
    records = kafka_reader(own_tansu.bootstrap, app.settings.topic_msg, 6)
    assert {int(r.headers["event_id"]) for r in records} == {r.event_id for r in later}
    for flid in ("B1", "B2"):
        versions = [int(r.headers["state_version"]) for r in records if r.key == flid]
        assert versions == sorted(versions) and set(versions) == {2, 3, 4}
    app.dispose()


def test_killed_between_produce_and_mark_resends_same_event_id(settings, clock, kafka_bootstrap, kafka_reader,
                                                               env_for):
    """US-07 AC3, INV-10: a dispatcher killed after the broker took the records but before it marked
    them resends them on restart with the same event_id (duplicates allowed, nothing lost)."""
    app = make_app(settings, clock, kafka_bootstrap)
    process(app, gtdt("K1", (1, "A1")), gtdt("K2", (1, "A2")), gtdt("K1", (1, "A3")))
    env = env_for(MSGX_KAFKA_BOOTSTRAP=kafka_bootstrap, MSGX_TOPIC_MSG=app.settings.topic_msg,
                  MSGX_TOPIC_SCHD=app.settings.topic_schd)
    killed = subprocess.run([MSGX, "dispatch", "--drain"], env={**env, "MSGX_FAULT_STEP": "dispatch_before_mark"},
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9, killed.stderr
    assert all(r.sent_at is None for r in rows(app))
    first = kafka_reader(kafka_bootstrap, app.settings.topic_msg, 3)
    assert len(first) == 3
    again = subprocess.run([MSGX, "dispatch", "--drain"], env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    assert all(r.sent_at for r in rows(app) + rows(app, "schd"))
    records = kafka_reader(kafka_bootstrap, app.settings.topic_msg, 6)
    ids = sorted(int(r.headers["event_id"]) for r in records)
    assert ids == sorted(2 * [r.event_id for r in rows(app)])
    by_id: dict[int, set[str]] = {}
    for r in records:
        by_id.setdefault(int(r.headers["event_id"]), set()).add(r.value)
    assert all(len(v) == 1 for v in by_id.values())
    app.dispose()
