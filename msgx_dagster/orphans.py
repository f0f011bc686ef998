"""Telling a run whose worker died unnoticed from a live one (OPS-1), for the sensor and the
schedule that start the long-lived and looping runs.

A run worker killed on its own is reported failed by its code server. When the code server dies
with its run workers (``kill -9`` of its process group, a container restart) nothing is left to
report them: their runs stay STARTED, and a sensor or schedule that skips while a run of its job is
active would skip for good. So these runs leave a heartbeat in PostgreSQL (component, pid, host,
when the process started, its last beat: ``store.monitoring`` owns the statements), and whoever
starts them reads it. Sensors and schedules are evaluated in the code server, which starts its run
workers on its own host: a pid is checked only on the host that wrote it. A heartbeat belongs to a
run when its process started after the run did. This module decides; the inbox sensor and the
looping schedules act (mark the run failed with the reason, start the next run in the same
evaluation).

Every other job's runs need no heartbeat of their own: with Dagster's default run launcher a run
worker is a child process of the code server, and Dagster records its pid in the run's first engine
event ("Started process for run (pid: N)"). ``run_worker_sensor``, evaluated in that code server,
fails a run whose worker that pid no longer names (T5, failing other dead runs). Run monitoring in the daemon covers
what has no worker to look at yet: a run stuck starting.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import dagster as dg
import psutil
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from msgx_dagster.resources import MsgxResource
from msgx_engine.db import make_engine
from msgx_engine.store import monitoring

log = logging.getLogger(__name__)

# A looping run beats every BEAT_S; one that has not beaten for STALE_S (six beats, far longer
# than a slow round) is dead. With minute ticks its schedule replaces it within two minutes.
BEAT_S = 10.0
STALE_S = 60.0


def pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class Reading:
    """One look at PostgreSQL: a component's heartbeat (None: it never beat), the database's
    clock, and whether the advisory lock asked about is held."""

    beat: monitoring.Heartbeat | None
    db_now: datetime
    lock_held: bool = False


def read(msgx: MsgxResource, component: str, lock: int | None = None) -> Reading:
    """One short connection (no pool: a sensor or schedule tick holds nothing between ticks)."""
    engine = make_engine(msgx.settings().resolved().db_url or "", single=True)
    try:
        with engine.connect() as conn:
            beat = next((b for b in monitoring.heartbeats(conn) if b.component == component), None)
            held = lock is not None and monitoring.advisory_lock_held(conn, lock)
            return Reading(beat, monitoring.database_now(conn), held)
    finally:
        engine.dispose()


def owned(beat: monitoring.Heartbeat | None, run_started: float) -> bool:
    """The heartbeat was written by the run that started at ``run_started`` (Unix time): its
    process started after the run did (an earlier run's heartbeat says nothing about this one)."""
    return beat is not None and beat.started_at is not None and beat.started_at.timestamp() >= run_started


def process_gone(beat: monitoring.Heartbeat | None) -> bool:
    """The heartbeat names a process of this host that is no longer running."""
    return (beat is not None and beat.pid is not None and beat.host == socket.gethostname()
            and not pid_running(beat.pid))


def started_run(instance: dg.DagsterInstance, job_name: str) -> dg.RunRecord | None:
    """The STARTED run of ``job_name``, if any (every such job is a singleton: one at most)."""
    records = instance.get_run_records(dg.RunsFilter(job_name=job_name, statuses=[dg.DagsterRunStatus.STARTED]),
                                       limit=1)
    return records[0] if records else None


def fail(context: dg.SensorEvaluationContext | dg.ScheduleEvaluationContext, run: dg.DagsterRun,
         message: str) -> None:
    """Mark an orphaned run failed, saying why (the run's page shows the message)."""
    context.log.warning(message)
    context.instance.report_run_failed(run, message)


# --- the looping runs ----------------------------------------------------------------------------
@dataclass(frozen=True)
class LoopSighting:
    """What a schedule tick saw of the STARTED looping run. ``beat_age_s``: seconds since the run's
    own last heartbeat (database clock), None when it has not beaten yet; ``gone``: the process
    that beat is provably not running."""

    run_age_s: float
    beat_age_s: float | None
    gone: bool = False


def looping_run_dead(seen: LoopSighting, stale_s: float = STALE_S) -> str | None:
    """Why the STARTED looping run is dead, or None while it may be alive. Pure."""
    if seen.gone:
        return "its process has ended"
    if seen.beat_age_s is None:
        return (f"it has not reported once in the {seen.run_age_s:.0f} s since it started"
                if seen.run_age_s > stale_s else None)
    return f"its last heartbeat is {seen.beat_age_s:.0f} s old" if seen.beat_age_s > stale_s else None


def look_at_looping_run(record: dg.RunRecord, component: str, now: float) -> LoopSighting | None:
    """The sighting of a STARTED looping run, or None when there is nothing to judge: no start
    time recorded, or PostgreSQL cannot be read (the run is left alone until a later tick). The
    resource is made here, not injected into the schedule: it only reads the environment, and the
    request schedules' ticks that never look (shadow mode, no STARTED run) then need no resource."""
    started = record.start_time
    if started is None:
        return None
    try:
        reading = read(MsgxResource(), component)
    except SQLAlchemyError as exc:
        log.warning("the %s heartbeat could not be read (%s): the run is judged at a later tick",
                    component, exc.__class__.__name__)
        return None
    if reading.beat is None or not owned(reading.beat, started):
        return LoopSighting(now - started, None)
    age = (reading.db_now - reading.beat.beat_at).total_seconds()
    return LoopSighting(now - started, age, process_gone(reading.beat))


def end_dead_looping_run(context: dg.ScheduleEvaluationContext, job_name: str, component: str,
                         now: float | None = None) -> None:
    """Mark the STARTED run of ``job_name`` failed if its heartbeat says it is dead (``now``: Unix
    time, this host's clock by default)."""
    record = started_run(context.instance, job_name)
    if record is None:
        return
    seen = look_at_looping_run(record, component, time.time() if now is None else now)
    why = looping_run_dead(seen) if seen is not None else None
    if why is None:
        return
    run = record.dagster_run
    fail(context, run, f"the {job_name} run {run.run_id} is gone: {why} (its run worker died, most likely with "
                       f"its code server); its schedule marks it failed and starts the next run")


class Pulse:
    """A looping run's heartbeat, written at most every ``every_s`` (call it before the first round
    and between rounds); the first beat that gets through also records when the process started,
    which makes the heartbeat this run's. Each beat is its own short transaction; a failed one is
    only logged: the run's next round notices a dead database on its own, and a run that cannot
    beat for STALE_S is replaced, which is right."""

    def __init__(self, engine: Engine, component: str, every_s: float = BEAT_S,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.engine, self.component, self.every_s, self.monotonic = engine, component, every_s, monotonic
        self.last = -math.inf
        self.first = True

    def __call__(self) -> None:
        if self.monotonic() - self.last < self.every_s:
            return
        try:
            with self.engine.begin() as conn:
                monitoring.beat(conn, self.component, pid=os.getpid(), host=socket.gethostname(), started=self.first)
        except SQLAlchemyError as exc:
            log.warning("%s heartbeat not recorded: %s", self.component, exc.__class__.__name__)
            return
        self.last, self.first = self.monotonic(), False


# --- every other run: its worker's pid, from Dagster's own record -------------------------------
WORKER_STARTED = "Started process for run"    # the engine event a run worker writes first, with its pid
JUDGED = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]
PID_CLOCK_SLACK_S = 2.0   # a process's start time is derived from the boot time, a whole second


@dataclass(frozen=True)
class Worker:
    """A run's worker process as Dagster recorded it: its pid, and when it said so (Unix time)."""

    pid: int
    said_at: float


def run_worker(instance: dg.DagsterInstance, run_id: str) -> Worker | None:
    """The run's worker from its engine events, or None when none has said its pid yet (a run
    still starting, or one executed in the process that asked for it: ``dagster job execute``)."""
    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT, limit=10).records
    for record in records:
        entry = record.event_log_entry
        event = entry.dagster_event
        if event is None or not (entry.user_message or event.message or "").startswith(WORKER_STARTED):
            continue
        pid = event.engine_event_data.metadata.get("pid")
        if pid is not None and str(pid.value).isdigit():
            return Worker(int(str(pid.value)), entry.timestamp)
    return None


def worker_alive(worker: Worker) -> bool:
    """A process with the worker's pid runs on this host and started before the worker said its
    pid (a later process reusing the pid is not the worker; a zombie has ended)."""
    try:
        process = psutil.Process(worker.pid)
        return (process.status() != psutil.STATUS_ZOMBIE
                and process.create_time() <= worker.said_at + PID_CLOCK_SLACK_S)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def workers_are_children(instance: dg.DagsterInstance) -> bool:
    """Runs are processes of the code server (Dagster's default run launcher), so a pid it reads
    is a run worker's. With the Docker or Kubernetes launcher run monitoring checks the workers."""
    return type(instance.run_launcher) is dg.DefaultRunLauncher


def end_runs_without_worker(context: dg.SensorEvaluationContext, skip_jobs: frozenset[str]) -> list[str]:
    """Fail every starting or started run of this code location's jobs (cancel a canceling one)
    whose worker is gone; the ids of the runs ended. ``skip_jobs``: the jobs whose own sensor or
    schedule judges their runs and starts the successor in the same evaluation."""
    instance = context.instance
    repository = context.repository_def
    if repository is None or not workers_are_children(instance):
        return []
    ended = []
    for record in instance.get_run_records(dg.RunsFilter(statuses=JUDGED)):
        run = record.dagster_run
        if run.job_name in skip_jobs or not repository.has_job(run.job_name):
            continue
        worker = run_worker(instance, run.run_id)
        if worker is None or worker_alive(worker):
            continue
        why = (f"the {run.job_name} run {run.run_id} has no run worker any more: process {worker.pid} has ended "
               "(it died, most likely with its code server)")
        if run.status == dg.DagsterRunStatus.CANCELING:
            context.log.warning(why)
            instance.report_run_canceled(run, f"{why}; run_worker_sensor marks it canceled")
        else:
            fail(context, run, f"{why}; run_worker_sensor marks it failed so that the next {run.job_name} run "
                               "can start")
        ended.append(run.run_id)
    return ended
