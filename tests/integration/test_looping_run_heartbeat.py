"""The request-tracking run's heartbeat and what its minute schedule makes of it (OPS-1, OPS-2, P18),
against the test's PostgreSQL and a Dagster instance: a tracking run beats as its own process; the
tick fails a STARTED tracking run whose process is gone or that has been silent too long, and
starts the next run in the same evaluation; a run that beats is left alone. (The code server
really killed with its runs: tests/e2e/test_topology.py.)"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import dagster as dg
from dagster._core.events import DagsterEvent, DagsterEventType
from sqlalchemy import text

from msgx_dagster.jobs.common import LOOPING_RUN_S
from msgx_dagster.jobs.requests import HEARTBEAT, request_tracking_job
from msgx_dagster.orphans import STALE_S, Pulse, end_dead_looping_run, owned
from msgx_dagster.resources import MsgxResource
from msgx_dagster.schedules import schedules_for
from msgx_engine.store import monitoring

ONE_ROUND = {"ops": {"request_tracking_op": {"config": {"run_for_s": 0}}}}


def beat_of(app) -> monitoring.Heartbeat | None:
    with app.engine.connect() as conn:
        return next((b for b in monitoring.heartbeats(conn) if b.component == HEARTBEAT), None)


def started_run(instance: dg.DagsterInstance) -> dg.RunRecord:
    """A tracking run as its worker leaves it once running: STARTED, with its start time."""
    run = instance.create_run_for_job(request_tracking_job, status=dg.DagsterRunStatus.NOT_STARTED)
    instance.report_dagster_event(DagsterEvent(event_type_value=DagsterEventType.RUN_START.value,
                                               job_name=run.job_name), run.run_id)
    [record] = instance.get_run_records(dg.RunsFilter(run_ids=[run.run_id]))
    assert record.dagster_run.status == dg.DagsterRunStatus.STARTED and record.start_time is not None
    return record


def tick(instance: dg.DagsterInstance) -> dg.RunRequest | dg.SkipReason:
    schedule = next(s for s in schedules_for(shadow=False) if s.job_name == request_tracking_job.name)
    with dg.build_schedule_context(instance=instance) as context:
        return schedule(context)


def failure(instance: dg.DagsterInstance, run_id: str) -> str:
    run = instance.get_run_by_id(run_id)
    assert run is not None and run.status == dg.DagsterRunStatus.FAILURE
    [event] = instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    return event.message or ""


def assert_next_run_requested(request: dg.RunRequest | dg.SkipReason) -> None:
    assert isinstance(request, dg.RunRequest), request
    assert request.run_config == {"ops": {"request_tracking_op": {"config": {"run_for_s": LOOPING_RUN_S}}}}
    assert int(request.tags["dagster/max_runtime"]) > LOOPING_RUN_S + 120    # never cuts a healthy run


def test_a_tracking_run_beats_as_its_own_process(env, app):
    """OPS-1: a tracking run leaves a heartbeat naming its process and host, started after the run
    did (so it is that run's, not an earlier one's)."""
    with dg.instance_for_test() as instance:
        result = request_tracking_job.execute_in_process(run_config=ONE_ROUND, resources={"msgx": MsgxResource()},
                                                         instance=instance)
        assert result.success
        [record] = instance.get_run_records(dg.RunsFilter(run_ids=[result.run_id]))
    beat = beat_of(app)
    assert beat is not None and record.start_time is not None
    assert (beat.pid, beat.host) == (os.getpid(), socket.gethostname())
    assert owned(beat, record.start_time)


def test_pulse_beats_at_most_every_period_and_marks_its_start_once(app):
    """OPS-1: the heartbeat is written before the first round and then at most every period (not
    once a round: a round is a second); only the first beat records the process's start."""
    t = [0.0]
    pulse = Pulse(app.engine, HEARTBEAT, every_s=10.0, monotonic=lambda: t[0])
    pulse()
    first = beat_of(app)
    assert first is not None and first.started_at is not None
    t[0] = 9.0
    pulse()
    assert beat_of(app) == first
    t[0] = 10.0
    pulse()
    later = beat_of(app)
    assert later is not None and later.beat_at > first.beat_at and later.started_at == first.started_at


def test_tick_fails_a_tracking_run_whose_process_is_gone_and_starts_the_next(env, app):
    """OPS-1/OPS-2: the code server died with the tracking run's worker, so the run stays STARTED
    with nothing to report it; its heartbeat names a process of this host that has ended. The
    minute tick marks it failed saying why and starts the next run in the same evaluation."""
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                           text=True, check=True)
    with dg.instance_for_test() as instance:
        record = started_run(instance)
        with app.engine.begin() as conn:
            monitoring.beat(conn, HEARTBEAT, pid=int(ended.stdout), host=socket.gethostname(), started=True)
        assert_next_run_requested(tick(instance))
        message = failure(instance, record.dagster_run.run_id)
    assert "process has ended" in message and "its schedule marks it failed" in message


def test_tick_fails_a_silent_tracking_run_and_leaves_a_beating_one(env, app):
    """OPS-1/P18: a tracking run that beats is left alone (the tick skips, the run stays STARTED);
    one whose last heartbeat is older than the bound (on another host, say, where its pid cannot be
    checked) is failed and replaced; so is one that never beat within the bound of its start."""
    with dg.instance_for_test() as instance:
        record = started_run(instance)
        run_id = record.dagster_run.run_id
        Pulse(app.engine, HEARTBEAT)()
        skipped = tick(instance)
        assert isinstance(skipped, dg.SkipReason) and "still active" in (skipped.skip_message or "")
        assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.STARTED  # type: ignore[union-attr]
        with app.engine.begin() as conn:
            conn.execute(text("UPDATE heartbeat SET beat_at = beat_at - make_interval(secs => :s) "
                              "WHERE component = :c"), {"s": STALE_S + 60, "c": HEARTBEAT})
        assert_next_run_requested(tick(instance))
        assert "last heartbeat is" in failure(instance, run_id)

        silent = started_run(instance)          # the heartbeat on record is the previous run's
        end_dead_looping_run(dg.build_schedule_context(instance=instance), request_tracking_job.name, HEARTBEAT,
                             now=time.time() + STALE_S / 2)
        assert instance.get_run_by_id(silent.dagster_run.run_id).status == \
            dg.DagsterRunStatus.STARTED  # type: ignore[union-attr]
        end_dead_looping_run(dg.build_schedule_context(instance=instance), request_tracking_job.name, HEARTBEAT,
                             now=time.time() + STALE_S + 1)
        assert "has not reported once" in failure(instance, silent.dagster_run.run_id)
