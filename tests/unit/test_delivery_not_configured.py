"""Delivery without Kafka (OPS-2): with MSGX_KAFKA_BOOTSTRAP unset the released
events stay pending by design, so the delivery_backlog check says "not configured" as the Redis
projection does, instead of failing two minutes into every demo; a configured Kafka is judged as
before, and dead events fail either way."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from msgx_engine.monitor.checks import MAX_UNSENT_AGE_S, delivery_backlog
from msgx_engine.monitor.figures import Figures

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
OLD = NOW - timedelta(seconds=MAX_UNSENT_AGE_S + 600)

BEHIND = Figures(now=NOW, open_messages=0, head_id=None, oldest_open_at=None, by_status_reason=[], dead=0,
                 backfill_pending=0, oldest_backfill_at=None, unsent_by_topic={"msg": 900, "schd": 300},
                 oldest_unsent_at=OLD, dead_events=0, requests=[], request_outcomes=[], unsupported_recent=[],
                 pump_lock_held=True)


def test_old_pending_events_fail_only_where_kafka_is_configured():
    """The same outbox, 1,200 events released ten minutes ago: failing with Kafka configured
    (the default of the figures), passing as "not configured" without it, the count still shown."""
    configured = delivery_backlog(BEHIND, None)
    assert not configured.passed
    absent = delivery_backlog(replace(BEHIND, kafka_configured=False), None)
    assert absent.passed
    assert absent.summary.startswith("Kafka not configured") and "1200 released event(s)" in absent.summary
    assert absent.metadata["configured"] is False and absent.metadata["unsent_released_events"] == 1200


def test_dead_events_fail_even_without_kafka():
    """Events that died under an earlier configuration still wait for an operator."""
    result = delivery_backlog(replace(BEHIND, kafka_configured=False, dead_events=2, dead_event_ids=(7, 9)), None)
    assert not result.passed and "7, 9" in result.summary
