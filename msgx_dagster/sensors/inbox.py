"""inbox_sensor: requests a pump run only when there is processable work and no pump run is
queued or in flight (the queue would otherwise pile up runs). Explicit SkipReason otherwise.

It also ends a pump run that died without Dagster noticing. A run worker killed on its own is
reported by its code server, but when the code server dies with its run workers (``kill -9`` of
its process group, a container restart) nothing is left to report them: the run stays STARTED,
and a sensor that skips while a pump run is active would skip for good. The pump's PostgreSQL
writer lock tells a live pump from a dead one: a live pump holds it for its whole life (it only
lets go to reconnect after a lost connection, and takes it again within seconds). So a STARTED
pump run past its start-up grace, seen without the lock at two evaluations ``CONFIRM_S`` apart,
is orphaned: the sensor marks it failed and starts the next pump in the same evaluation. Sooner
when the run's own heartbeat names a process this host does not have (the code server, where the
sensor runs, starts its run workers on its own host): that pump is gone, no second look needed. Run
monitoring's maximum runtime (the ``dagster/max_runtime`` tag below) is only the slow backstop.

While this installation's writes are stopped for a cut-over it starts no pump (the pump would only
refuse): each evaluation skips saying "writes stopped for cut-over at mailbox id W (by NAME, at
TIME)" (``msgx_dagster/cutover.py``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import dagster as dg

from msgx_dagster.cutover import stopped_skip
from msgx_dagster.jobs.common import active_runs
from msgx_dagster.jobs.pump import LONG_LIVED_TAGS, PumpConfig, long_lived_run_config, pump_job
from msgx_dagster.orphans import fail, owned, process_gone, read, started_run
from msgx_dagster.resources import MsgxResource
from msgx_engine.monitor import backlog
from msgx_engine.store import cutover_state, locks, monitoring

STARTUP_GRACE_S = 30.0      # a run STARTED this recently may not have taken the writer lock yet
CONFIRM_S = 10.0            # longer than a live pump takes to retake its lock after a reconnect
# Run monitoring fails a pump run still going this long after its start: the pump ends itself at
# its own max runtime, so only a hung or orphaned run gets there.
MAX_RUNTIME_TAG = {"dagster/max_runtime": str(int(PumpConfig().max_runtime_s + 600))}


@dataclass(frozen=True)
class Cursor:
    """The sensor's state between evaluations: the run-key serial, and the pump run last seen
    without the writer lock (and since when, Unix time)."""

    serial: int = 0
    suspect: str | None = None
    since: float = 0.0

    @classmethod
    def parse(cls, raw: str | None) -> Cursor:
        if not raw:
            return cls()
        if raw.isdigit():                      # the cursor before orphan detection: the serial alone
            return cls(int(raw))
        doc = json.loads(raw)
        return cls(int(doc.get("serial", 0)), doc.get("suspect"), float(doc.get("since", 0.0)))

    def dump(self) -> str:
        return json.dumps({"serial": self.serial, "suspect": self.suspect, "since": self.since})


@dataclass(frozen=True)
class Sighting:
    """What one evaluation saw of the STARTED pump run. ``alive``: within its start-up grace, or
    the writer lock is held. ``gone``: its pump's process is provably not running (the heartbeat
    this run's pump wrote names a pid this host does not have)."""

    alive: bool
    gone: bool = False


def judge(cursor: Cursor, run_id: str, seen: Sighting, now: float) -> tuple[Cursor, bool]:
    """The next cursor, and whether the STARTED pump run ``run_id`` is orphaned now. Pure."""
    if seen.alive:
        return Cursor(cursor.serial), False
    if seen.gone:
        return Cursor(cursor.serial), True
    if cursor.suspect != run_id:
        return Cursor(cursor.serial, run_id, now), False
    return cursor, now - cursor.since >= CONFIRM_S


def look(msgx: MsgxResource, record: dg.RunRecord, now: float) -> Sighting:
    """Is the writer lock held, and is the run's pump process gone (``orphans``: the heartbeat is
    this run's when its pump started after the run did; its pid is checked on its own host only)?"""
    started = record.start_time or now
    reading = read(msgx, monitoring.PUMP, locks.PUMP)
    ours = owned(reading.beat, started)
    young = not ours and now - started < STARTUP_GRACE_S
    return Sighting(alive=reading.lock_held or young, gone=ours and process_gone(reading.beat))


def end_orphan(context: dg.SensorEvaluationContext, msgx: MsgxResource, cursor: Cursor) -> Cursor:
    """Look at the STARTED pump run, if any; mark it failed when it is orphaned (see the module doc)."""
    record = started_run(context.instance, pump_job.name)
    if record is None:
        return Cursor(cursor.serial)
    run = record.dagster_run
    now = time.time()
    cursor, orphaned = judge(cursor, run.run_id, look(msgx, record, now), now)
    if orphaned:
        fail(context, run, f"the pump of run {run.run_id} is gone: it does not hold the writer lock and its "
                           "process has ended (its run worker died with its code server); inbox_sensor marks "
                           "it failed and starts the next pump")
        return Cursor(cursor.serial)
    return cursor


def note_replacement(context: dg.SensorEvaluationContext, run_key: str) -> None:
    """When the latest pump run failed (killed, out of memory, ended as an orphan), write on its page
    which run replaces it, so an operator reading it sees more than Dagster's own failure hint."""
    records = context.instance.get_run_records(dg.RunsFilter(job_name=pump_job.name), limit=1)
    if not records or records[0].dagster_run.status != dg.DagsterRunStatus.FAILURE:
        return
    context.instance.report_engine_event(
        f"inbox_sensor started the next pump run (run key {run_key}) to replace this failed one: it goes on "
        "from the first unfinished message, so nothing this run was doing is lost", records[0].dagster_run)


@dg.sensor(job=pump_job, minimum_interval_seconds=5, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Starts the long-lived pump when the mailbox has work and no pump runs; "
                       "fails a pump run whose worker died unnoticed.")
def inbox_sensor(context: dg.SensorEvaluationContext, msgx: MsgxResource):
    cursor = end_orphan(context, msgx, Cursor.parse(context.cursor))
    if active_runs(context.instance, pump_job.name):
        context.update_cursor(cursor.dump())
        return dg.SkipReason("a pump run is already queued or running")
    with msgx.open_app() as app:
        with app.engine.connect() as conn:
            stopped = cutover_state.stop(conn)
        work = backlog(app.engine, app.mailbox, probe_limit=1) if stopped is None else None
    if stopped is not None:
        context.update_cursor(cursor.dump())
        return stopped_skip(stopped, "no pump run")
    assert work is not None
    if not work.processable:
        context.update_cursor(cursor.dump())
        return dg.SkipReason("no processable mailbox rows, open messages or pending marks")
    serial = cursor.serial + 1
    context.update_cursor(Cursor(serial).dump())
    note_replacement(context, f"pump-{serial}")
    return dg.RunRequest(run_key=f"pump-{serial}", run_config=long_lived_run_config(),
                         tags={"msgx/started_for": work.described(), **LONG_LIVED_TAGS, **MAX_RUNTIME_TAG})
