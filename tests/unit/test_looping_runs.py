"""P18 (latency): request tracking (US-08, D16) repeats its round inside one run of just
under ten minutes, and its minute schedule skips while such a run is queued or running, so the pump
pays one run start per ten minutes, not one per minute. ``repeat_for`` is the loop the run is built
on (fake time: nothing sleeps). The health checks need no run at all: a sensor evaluates them."""

from __future__ import annotations

import dagster as dg
import pytest

from msgx_dagster.jobs.common import LOOPING_RUN_S
from msgx_dagster.jobs.requests import request_tracking_job
from msgx_dagster.schedules import SHADOW_SKIP, schedules_for
from msgx_engine.clock import repeat_for


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.calls: list[float] = []

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.now += seconds

    def round(self, cost: float = 0.0):
        def call() -> None:
            self.calls.append(self.now)
            self.now += cost
        return call


def test_repeat_for_calls_every_period_and_last_at_the_deadline():
    t = FakeTime()
    assert repeat_for(595, 60, t.round(), sleep=t.sleep, monotonic=lambda: t.now) == 11
    assert t.calls == [0, 60, 120, 180, 240, 300, 360, 420, 480, 540, 595]


def test_repeat_for_zero_is_one_call_and_a_slow_round_never_overruns_the_deadline():
    t = FakeTime()
    assert repeat_for(0, 60, t.round(), sleep=t.sleep, monotonic=lambda: t.now) == 1
    t = FakeTime()
    assert repeat_for(10, 1, t.round(cost=4), sleep=t.sleep, monotonic=lambda: t.now) == 3
    assert t.calls == [0, 5, 10]      # each pause still 1 s after a 4 s round; the last one at 10
    t = FakeTime()
    assert repeat_for(10, 60, t.round(cost=12), sleep=t.sleep, monotonic=lambda: t.now) == 1


LOOPING = [(request_tracking_job, "request_tracking_op")]


def _schedule(job: dg.JobDefinition, *, shadow: bool = False) -> dg.ScheduleDefinition:
    return next(s for s in schedules_for(shadow=shadow) if s.job_name == job.name)


def _tick(schedule: dg.ScheduleDefinition, instance: dg.DagsterInstance) -> dg.RunRequest | dg.SkipReason:
    with dg.build_schedule_context(instance=instance) as ctx:
        return schedule(ctx)


@pytest.mark.parametrize(("job", "op_name"), LOOPING, ids=["request_tracking"])
def test_minute_schedule_starts_a_ten_minute_run_and_skips_while_it_is_active(job, op_name):
    schedule = _schedule(job)
    assert schedule.cron_schedule == "* * * * *" and schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    with dg.instance_for_test() as instance:
        request = _tick(schedule, instance)
        assert isinstance(request, dg.RunRequest)
        assert request.run_config == {"ops": {op_name: {"config": {"run_for_s": LOOPING_RUN_S}}}}
        assert 540 < LOOPING_RUN_S < 600, "just under ten minutes: the next run starts at the next minute"
        for status in (dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED):
            run = instance.create_run_for_job(job, status=status)
            skipped = _tick(schedule, instance)
            assert isinstance(skipped, dg.SkipReason) and "still active" in (skipped.skip_message or "")
            instance.report_run_canceled(run)
        assert isinstance(_tick(schedule, instance), dg.RunRequest), "the next tick after the run ends"


def test_shadow_request_tracking_still_skips_for_shadow_mode():
    """OPS-3 (D29): in shadow mode the tracking tick skips for that reason, active run or not."""
    with dg.instance_for_test() as instance:
        skipped = _tick(_schedule(request_tracking_job, shadow=True), instance)
        assert isinstance(skipped, dg.SkipReason) and skipped.skip_message == SHADOW_SKIP
