"""Delivery under Dagster and beside the pump: dispatch_job, projection_rebuild_job, the drift
check, the pump's inline dispatcher (US-07, INV-24, D10, DESIGN §5)."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace

import dagster as dg
import pytest

from msgx_dagster.assets.specs import KAFKA_MSG
from msgx_dagster.checks import CHECK_DEFS
from msgx_dagster.jobs.dispatch import dispatch_job
from msgx_dagster.jobs.projection import projection_rebuild_job
from msgx_dagster.resources import MsgxResource
from msgx_engine.app import App
from msgx_engine.clock import SystemClock
from msgx_engine.delivery.dispatcher import DispatchOptions
from msgx_engine.delivery.projection import DEFAULT_KEY, connect
from msgx_engine.delivery.runner import BackgroundDispatcher
from msgx_engine.pipeline.pump import PumpOptions
from msgx_engine.store import outbox
from msgx_engine.store.outbox import TOPIC_MSG
from tests.builders import gtdt

projection_drift_check = CHECK_DEFS["projection_drift"]
DRAIN = {"ops": {"dispatch_op": {"config": {"run_for_s": 0}}}}


@pytest.fixture
def kenv(settings, monkeypatch, kafka_bootstrap):
    tag = uuid.uuid4().hex[:8]
    monkeypatch.setenv("MSGX_DB_URL", settings.db_url)
    monkeypatch.setenv("MSGX_MAILBOX_URL", settings.mailbox_url)
    monkeypatch.setenv("MSGX_KAFKA_BOOTSTRAP", kafka_bootstrap)
    monkeypatch.setenv("MSGX_TOPIC_MSG", f"msg_{tag}")
    monkeypatch.setenv("MSGX_TOPIC_SCHD", f"schd_{tag}")
    return replace(settings, kafka_bootstrap=kafka_bootstrap, topic_msg=f"msg_{tag}", topic_schd=f"schd_{tag}")


def process(app: App, *messages: str, **kw) -> None:
    for m in messages:
        app.mailbox.put(m)
    app.pump(PumpOptions(exit_when_waiting=True, idle_poll_s=0.01), **kw).run()


def execute(job, **kw) -> tuple[dg.ExecuteInProcessResult, list[str]]:
    """Run in process; also return the run's log messages (context.log lines are not DagsterEvents)."""
    with dg.DagsterInstance.ephemeral() as instance:
        result = job.execute_in_process(resources={"msgx": MsgxResource()}, instance=instance, **kw)
        return result, [e.user_message for e in instance.all_logs(result.run_id)]


def unsent(app: App, topic: str | None = None) -> int:
    with app.engine.connect() as conn:
        return outbox.unsent_count(conn, topic)




def test_dispatch_job_delivers_with_per_batch_materializations(kenv, clock, kafka_reader):
    """US-07, DESIGN §5: dispatch_job sends every released event and logs one materialization per
    topic per batch (not per record)."""
    app = App.from_settings(kenv, clock=clock)
    process(app, *[gtdt(f"J{i % 2}", (1, f"G{i}")) for i in range(4)])
    result = dispatch_job.execute_in_process(run_config=DRAIN, resources={"msgx": MsgxResource()})
    assert result.success and unsent(app) == 0
    mats = result.asset_materializations_for_node("dispatch_op")
    msg_mats = [m for m in mats if m.asset_key == KAFKA_MSG]
    assert len(msg_mats) == 1 and msg_mats[0].metadata["records_sent"].value == 4
    assert len(kafka_reader(kenv.kafka_bootstrap, kenv.topic_msg, 4)) == 4
    app.dispose()


def test_dispatch_job_without_kafka_reports_not_configured(settings, clock, monkeypatch):
    """DESIGN §4: without MSGX_KAFKA_BOOTSTRAP the run succeeds, says so, and events stay pending."""
    monkeypatch.setenv("MSGX_DB_URL", settings.db_url)
    monkeypatch.setenv("MSGX_MAILBOX_URL", settings.mailbox_url)
    monkeypatch.delenv("MSGX_KAFKA_BOOTSTRAP", raising=False)
    app = App.from_settings(settings, clock=clock)
    process(app, gtdt("N1", (1, "A1")))
    result, logs = execute(dispatch_job, run_config=DRAIN)
    assert result.success and unsent(app) == 2
    assert any("not configured" in m for m in logs)
    app.dispose()


def test_rebuild_job_and_drift_check(settings, clock, monkeypatch, own_redis):
    """INV-24, D10: the drift check fails on a flushed projection, projection_rebuild_job restores it
    from PostgreSQL, and the check passes again."""
    monkeypatch.setenv("MSGX_DB_URL", settings.db_url)
    monkeypatch.setenv("MSGX_MAILBOX_URL", settings.mailbox_url)
    monkeypatch.setenv("MSGX_REDIS_URL", own_redis.url)
    app = App.from_settings(replace(settings, redis_url=own_redis.url), clock=clock)
    process(app, gtdt("Q1", (1, "A1")), gtdt("Q2", (1, "A2")))
    client = connect(own_redis.url)
    before = client.hgetall(DEFAULT_KEY)
    client.flushall()
    failed = projection_drift_check(msgx=MsgxResource())
    assert not failed.passed and failed.metadata["missing"].value == 2
    result = projection_rebuild_job.execute_in_process(resources={"msgx": MsgxResource()})
    assert result.success and client.hgetall(DEFAULT_KEY) == before
    assert projection_drift_check(msgx=MsgxResource()).passed
    app.dispose()


def test_inline_dispatcher_delivers_beside_the_pump_and_yields_the_lock(kenv, clock, kafka_reader):
    """US-07, DESIGN §5: the pump's inline dispatcher thread delivers released events within its poll;
    a scheduled dispatch meanwhile finds the lock taken (skips), and after stop() the lock is free."""
    app = App.from_settings(kenv, clock=clock)
    with BackgroundDispatcher(kenv, app.engine, clock=SystemClock()) as inline:
        process(app, gtdt("I1", (1, "A1")), gtdt("I2", (1, "A2")))
        deadline = time.monotonic() + 30
        while unsent(app):
            assert time.monotonic() < deadline, "inline dispatcher did not deliver"
            time.sleep(0.05)
        skipped, logs = execute(dispatch_job, run_config=DRAIN)
        assert skipped.success and any("dispatch skipped" in m for m in logs)
    assert not inline._thread.is_alive()
    assert len(kafka_reader(kenv.kafka_bootstrap, kenv.topic_msg, 2)) == 2
    process(app, gtdt("I1", (1, "B1")))
    assert dispatch_job.execute_in_process(run_config=DRAIN, resources={"msgx": MsgxResource()}).success
    assert unsent(app) == 0
    app.dispose()


def until_delivered(app: App, within_s: float) -> None:
    """Until every `msg` event is sent (`schd` waits for its 3 s flush, which needs a poll)."""
    deadline = time.monotonic() + within_s
    while unsent(app, TOPIC_MSG):
        assert time.monotonic() < deadline, f"inline dispatcher did not deliver within {within_s} s"
        time.sleep(0.05)


def test_issue16_inline_dispatcher_is_woken_by_the_pump_commit_not_its_poll(kenv, clock, kafka_reader):
    """DESIGN §5: the pump wakes its inline dispatcher when a commit releases
    events, so delivery follows the commit instead of the next poll. With a 10-minute poll, the
    second round (the dispatcher is idle in its pause by then) is delivered only by the wake-up;
    stop() also ends the pause at once."""
    app = App.from_settings(kenv, clock=clock)
    with BackgroundDispatcher(kenv, app.engine, clock=SystemClock(), options=DispatchOptions(poll_s=600)) as inline:
        process(app, gtdt("W1", (1, "A1")), on_release=inline.wake)
        until_delivered(app, 30)
        process(app, gtdt("W1", (1, "A2")), gtdt("W2", (1, "B1")), on_release=inline.wake)
        until_delivered(app, 30)
        started = time.monotonic()
    assert not inline._thread.is_alive() and time.monotonic() - started < 30
    assert len(kafka_reader(kenv.kafka_bootstrap, kenv.topic_msg, 3)) == 3
    app.dispose()
