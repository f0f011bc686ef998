"""Delivery counted durably (OPS-2): ``msgx_events_delivered_total{topic}`` and the latency from an
event's release to Kafka's acknowledgement, written by the dispatcher's delivered mark against a
real Kafka-wire broker (tansu), unchanged by a resend and by archiving."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, text

from msgx_engine.app import App
from msgx_engine.delivery.dispatcher import DispatchOptions
from msgx_engine.delivery.runner import build_dispatcher
from msgx_engine.pipeline.pump import PumpOptions
from msgx_engine.store import outbox
from msgx_engine.store.tables import msg_event
from tests.builders import gtdt
from tests.metrics_support import TickingClock, histogram, scrape, values_of

DELIVERED = "msgx_events_delivered"
DELIVERY_LATENCY = "msgx_event_delivery_latency_seconds"


@pytest.fixture
def clock() -> TickingClock:
    return TickingClock(datetime.now(UTC))


def sent_by_topic(app: App) -> dict[tuple[str], float]:
    with app.engine.connect() as conn:
        rows = conn.execute(text("SELECT topic, count(*) FROM msg_event WHERE sent_at IS NOT NULL GROUP BY topic"))
        return {(topic,): float(n) for topic, n in rows}


def test_delivered_events_are_counted_once_with_their_latency_and_survive_archiving(kapp, clock, kafka_reader):
    """OPS-2: after a real delivery, the counter per topic equals the events marked delivered and
    the delivery histogram observed each of them (count = events, sum > 0, cumulative buckets); a
    second mark of the same events (a resend's report) adds nothing; archiving then moves the
    delivered events and finished messages out, and no counter or histogram goes down."""
    for body in [gtdt(f, (1, f"G{i}")) for i in range(3) for f in ("E1", "E2")]:
        kapp.mailbox.put(body)
    kapp.pump(PumpOptions(exit_when_waiting=True, idle_poll_s=0.01)).run()
    summary = build_dispatcher(kapp.settings, kapp.engine, clock=clock, options=DispatchOptions(),
                               delivery_timeout_s=10.0).run()
    assert summary.msg_sent == 6 and summary.schd_events == 6
    assert len(kafka_reader(kapp.settings.kafka_bootstrap, kapp.settings.topic_msg, 6)) == 6

    delivered = sent_by_topic(kapp)
    assert delivered == {("msg",): 6.0, ("schd",): 6.0}
    metrics = scrape(kapp.engine)
    assert metrics[DELIVERED].type == "counter"
    assert values_of(metrics[DELIVERED], "_total") == delivered
    _, total, count = histogram(metrics[DELIVERY_LATENCY])
    assert count == 12 and total > 0

    with kapp.engine.begin() as conn:        # a late second delivery report for the same events
        ids = [r[0] for r in conn.execute(select(msg_event.c.event_id))]
        assert outbox.mark_sent(conn, ids, clock.now()) == 0
    again = scrape(kapp.engine)
    assert values_of(again[DELIVERED], "_total") == delivered
    assert histogram(again[DELIVERY_LATENCY]) == histogram(metrics[DELIVERY_LATENCY])

    clock.advance(3 * 86400)
    report = kapp.archiver().run(kapp.archive_policy(older_than=timedelta(days=1)))
    assert report.counts.get("msg_event", 0) == 12 and sent_by_topic(kapp) == {}
    after = scrape(kapp.engine)
    assert values_of(after[DELIVERED], "_total") == delivered
    assert histogram(after[DELIVERY_LATENCY]) == histogram(metrics[DELIVERY_LATENCY])
    assert values_of(after["msgx_messages_terminal"], "_total") == values_of(
        metrics["msgx_messages_terminal"], "_total") == {("SUCCEEDED", "GTDT", "FLOP"): 6.0}
