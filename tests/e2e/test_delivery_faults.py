"""Delivery under failure, against real tansu brokers: US-07 AC1/AC3/AC5/AC6, INV-10, C-29, D14."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

from sqlalchemy import func, select, text, update

from msgx_engine.app import App
from msgx_engine.clock import SystemClock
from msgx_engine.delivery.dispatcher import Dispatcher, DispatchOptions
from msgx_engine.delivery.producer import KafkaSink
from msgx_engine.monitor.alerts import alert_text
from msgx_engine.monitor.checks import delivery_backlog
from msgx_engine.monitor.figures import figures
from msgx_engine.pipeline.pump import PumpOptions
from msgx_engine.store.outbox import SendPolicy
from msgx_engine.store.tables import msg_event
from tests.builders import gtdt
from tests.private_servers import free_port
from tests.recovery import recovery

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




def running_dispatcher(app: App, bootstrap: str, delivery_timeout_s: float,
                       policy: SendPolicy) -> tuple[threading.Thread, threading.Event, dict]:
    """A looping dispatcher on its own thread; set the event to stop it, the dict holds its summary."""
    stop = threading.Event()
    d = Dispatcher(app.engine, KafkaSink(bootstrap, delivery_timeout_s=delivery_timeout_s), SystemClock(),
                   topic_msg=app.settings.topic_msg, topic_schd=app.settings.topic_schd,
                   options=DispatchOptions(run_for_s=300, poll_s=0.05, schd_flush_s=0.5, policy=policy),
                   should_stop=stop.is_set)
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("summary", d.run()))
    thread.start()
    return thread, stop, result


def test_broker_outage_nothing_marked_then_all_delivered_in_order(settings, clock, own_tansu, kafka_reader):
    """US-07 AC1/AC6, INV-10, C-29, D14, F16: with the broker down nothing is marked sent (events back
    off, errors visible) and nothing goes DEAD, however many attempts the outage takes (here past an
    attempt limit of 3, standing in for the old 30-attempt budget); when it is back (empty, as a
    wiped broker) the same dispatcher rebuilds its producer and delivers every event, per-FLID order
    kept, same event_id."""
    app = make_app(settings, clock, own_tansu.bootstrap)
    policy = SendPolicy(backoff_base_s=0.2, backoff_cap_s=0.5, max_attempts=3)
    thread, stop, result = running_dispatcher(app, own_tansu.bootstrap, 2.0, policy)
    try:
        process(app, gtdt("B1", (1, "A1")), gtdt("B2", (1, "A2")))
        assert len(kafka_reader(own_tansu.bootstrap, app.settings.topic_msg, 2)) == 2
        wait_for("first events marked", lambda: all(r.sent_at for r in rows(app)))
        own_tansu.stop()
        process(app, *[gtdt(f, (1, f"X{i}")) for i in range(3) for f in ("B1", "B2")])
        wait_for("attempts past the limit", lambda: all(r.send_attempts > policy.max_attempts
                                                        for r in rows(app)[2:3] + rows(app, "schd")[2:3]))
        later = rows(app)[2:]
        assert len(later) == 6
        assert all(r.sent_at is None and r.dead_at is None for r in later + rows(app, "schd")[2:])
        assert later[0].send_error and "Connection refused" in later[0].send_error
        own_tansu.start()
        back = time.monotonic()
        wait_for("delivery after the outage", lambda: all(r.sent_at for r in rows(app) + rows(app, "schd")))
        recovery("Kafka unreachable past the attempt limit", back, "the broker started -> last event delivered")
    finally:
        stop.set()
        thread.join(60)
    assert result["summary"].producer_rebuilds >= 1 and result["summary"].dead == 0
    records = kafka_reader(own_tansu.bootstrap, app.settings.topic_msg, 6)
    assert {int(r.headers["event_id"]) for r in records} == {r.event_id for r in later}
    for flid in ("B1", "B2"):
        versions = [int(r.headers["state_version"]) for r in records if r.key == flid]
        assert versions == sorted(versions) and set(versions) == {2, 3, 4}
    app.dispose()


def test_broker_restarted_empty_under_a_kept_producer_heals_within_two_delivery_timeouts(settings, clock, own_tansu,
                                                                                           kafka_reader):
    """US-07 AC1, INV-10, C-29, F17: tansu is killed and started again, empty, on
    the same address while records wait in the dispatcher's producer. That producer's id belongs to
    the old broker: librdkafka bumps its epoch locally on every UNKNOWN_PRODUCER_ID and every record
    times out, for ever. After STALE_AFTER_TIMEOUTS such sends on a broker that answers metadata the
    dispatcher rebuilds its producer and resends from the first unsent event: every event arrives
    within two delivery timeouts of the broker's return (plus a few seconds for this shared machine),
    each event_id once for a consumer that drops the ids it has seen, per-FLID in order, without a
    restart of the dispatcher."""
    timeout_s = 5.0
    app = make_app(settings, clock, own_tansu.bootstrap)
    policy = SendPolicy(backoff_base_s=0.2, backoff_cap_s=0.5)
    thread, stop, result = running_dispatcher(app, own_tansu.bootstrap, timeout_s, policy)
    try:
        process(app, gtdt("R1", (1, "A1")), gtdt("R2", (1, "A2")))
        wait_for("first events marked", lambda: all(r.sent_at for r in rows(app) + rows(app, "schd")))
        own_tansu.kill()
        process(app, *[gtdt(f, (1, f"X{i}")) for i in range(3) for f in ("R1", "R2")])
        own_tansu.start()                     # empty, same address, the records still in the producer
        back = time.monotonic()
        wait_for("delivery after the broker came back empty",
                 lambda: all(r.sent_at for r in rows(app) + rows(app, "schd")), timeout_s=2 * timeout_s + 5)
        took = recovery("Kafka restarted empty", back, "the broker started, empty -> last event delivered")
    finally:
        stop.set()
        thread.join(60)
    assert took <= 2 * timeout_s + 5
    assert result["summary"].producer_rebuilds >= 1 and result["summary"].dead == 0
    later = rows(app)[2:]
    records = kafka_reader(own_tansu.bootstrap, app.settings.topic_msg, len(later))
    seen: list[int] = []
    for r in records:                         # a consumer that drops the event ids it has seen
        if int(r.headers["event_id"]) not in seen:
            seen.append(int(r.headers["event_id"]))
    assert sorted(seen) == [r.event_id for r in later]
    by_id = {r.event_id: r.flid for r in later}
    for flid in ("R1", "R2"):
        ids = [i for i in seen if by_id[i] == flid]
        assert ids == sorted(ids) and len(ids) == 3
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
    restarted = time.monotonic()
    again = subprocess.run([MSGX, "dispatch", "--drain"], env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    recovery("dispatcher killed between produce and mark", restarted,
             "the next msgx dispatch started -> every event resent and marked")
    assert all(r.sent_at for r in rows(app) + rows(app, "schd"))
    records = kafka_reader(kafka_bootstrap, app.settings.topic_msg, 6)
    ids = sorted(int(r.headers["event_id"]) for r in records)
    assert ids == sorted(2 * [r.event_id for r in rows(app)])
    by_id: dict[int, set[str]] = {}
    for r in records:
        by_id.setdefault(int(r.headers["event_id"]), set()).add(r.value)
    assert all(len(v) == 1 for v in by_id.values())
    app.dispose()


def test_a_broker_that_refuses_connections_is_named_in_msgx_outbox_and_the_delivery_check(settings, clock, env_for):
    """OPS-2, M27: the dispatcher stores its last send error and the broker it tried in
    PostgreSQL; another process's `msgx outbox` prints them, and once the oldest event has waited
    past the limit the delivery_backlog check (what `msgx status` and the alert say) gives Kafka's
    own words, "Connect to 127.0.0.1:PORT failed: Connection refused", not only "Kafka is down"."""
    port = free_port()                        # nothing listens there: every connection is refused
    bootstrap = f"127.0.0.1:{port}"
    app = make_app(settings, clock, bootstrap)
    process(app, gtdt("E1", (1, "A1")))
    summary = Dispatcher(app.engine, KafkaSink(bootstrap, delivery_timeout_s=2.0), SystemClock(),
                         topic_msg=app.settings.topic_msg, topic_schd=app.settings.topic_schd,
                         options=DispatchOptions(schd_flush_s=0.0)).run()
    assert summary.failed >= 1 and summary.dead == 0
    words = f"Connect to 127.0.0.1:{port} failed: Connection refused"
    env = env_for(MSGX_KAFKA_BOOTSTRAP=bootstrap)
    shown = subprocess.run([MSGX, "outbox"], env=env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and f"broker {bootstrap}" in shown.stdout and words in shown.stdout, shown.stdout
    as_json = subprocess.run([MSGX, "outbox", "--json"], env=env, capture_output=True, text=True, timeout=60)
    last = json.loads(as_json.stdout)["last_send_error"]
    assert last["broker"] == bootstrap and words in last["error"] and last["failing"]
    with app.engine.begin() as conn:          # the events have waited three minutes
        conn.execute(update(msg_event).values(released_at=func.now() - text("interval '3 minutes'")))
    check = delivery_backlog(figures(app.engine), None)
    assert not check.passed and words in check.summary and bootstrap in check.summary
    assert words in alert_text(check, mode="production", failing=True)
    status = subprocess.run([MSGX, "status", "--json"], env=env, capture_output=True, text=True, timeout=60)
    (line,) = [c for c in json.loads(status.stdout)["checks"] if c["name"] == "delivery_backlog"]
    assert line["state"] != "OK" and words in line["cause"]
    app.dispose()
