"""While the sensor's long-lived pump run is active it delivers to Kafka (its
inline dispatcher) and marks the mailbox (inline backfill), so the minute schedules of
dispatch_job and backfill_job skip instead of starting runs whose start-up CPU the pump pays in
latency. A pump run without the tag (a manual drain run: no inline dispatcher) does not stop them,
and they start again once no long-lived pump runs (US-07, US-09: the schedules are the backstop)."""

from __future__ import annotations

import dagster as dg
import pytest

from msgx_dagster.jobs.pump import LONG_LIVED_TAGS, pump_job
from msgx_dagster.schedules import PUMP_DELIVERS, PUMP_MARKS, backfill_schedule, dispatch_schedule

SCHEDULES = [(dispatch_schedule, PUMP_DELIVERS), (backfill_schedule, PUMP_MARKS)]


def _tick(schedule: dg.ScheduleDefinition, instance: dg.DagsterInstance) -> dg.RunRequest | dg.SkipReason:
    with dg.build_schedule_context(instance=instance) as ctx:
        return schedule(ctx)


@pytest.mark.parametrize(("schedule", "reason"), SCHEDULES, ids=["dispatch", "backfill"])
def test_minute_schedule_skips_only_while_the_long_lived_pump_runs(schedule, reason):
    with dg.instance_for_test() as instance:
        assert isinstance(_tick(schedule, instance), dg.RunRequest)
        drain = instance.create_run_for_job(pump_job, status=dg.DagsterRunStatus.STARTED)
        assert isinstance(_tick(schedule, instance), dg.RunRequest), "a drain run has no inline dispatcher"
        instance.report_run_canceled(drain)
        long_lived = instance.create_run_for_job(pump_job, status=dg.DagsterRunStatus.STARTED,
                                                 tags=LONG_LIVED_TAGS)
        skipped = _tick(schedule, instance)
        assert isinstance(skipped, dg.SkipReason) and skipped.skip_message == reason
        instance.report_run_failed(long_lived)
        assert isinstance(_tick(schedule, instance), dg.RunRequest), "the backstop once no pump runs"


def test_schedules_are_on_by_default():
    assert dispatch_schedule.default_status == backfill_schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    assert dispatch_schedule.cron_schedule == backfill_schedule.cron_schedule == "* * * * *"
