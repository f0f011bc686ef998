"""Every schedule. Cron is minute-granular: the jobs that must act every few seconds loop inside
one run for just under a minute (their run config) and are started every minute (DESIGN §5);
request tracking loops for just under ten minutes, and its minute ticks skip while such a run is
active (P18, looping runs: a run start costs the pump's latency seconds of CPU), unless that run is dead: its
worker died with its code server and nothing reported it, as its heartbeat shows (``orphans``);
the tick then fails it and starts the next run. The daily request jobs run on airport local
time. The health checks have no schedule: ``health_sensor`` evaluates them every 30 s without
starting a run (``sensors/health.py``).

Shadow mode (D29, OPS-3): the three schedules that register or send requests to the AODB are
STOPPED by default, and if an operator turns one on anyway each tick is skipped with the reason.
(The request tracker of a shadow instance records requests and never writes COUTMSGS; keeping
the schedules off means it does not even pretend to ask the AODB every night.)

Cut-over (OPS-4): while this installation's writes are stopped (``msgx cutover stop-writes``) the
request, dispatch and backfill ticks skip naming the stop (``cutover.py``); the promoted
installation's schedules do that work.
"""

import dagster as dg

from msgx_dagster.cutover import observing, skip_if_stopped
from msgx_dagster.jobs.archive import archive_job
from msgx_dagster.jobs.backfill import backfill_job
from msgx_dagster.jobs.common import LOOPING_RUN_S, active_runs, looping_run_config
from msgx_dagster.jobs.compare import ENV_AGAINST, compare_job, reference
from msgx_dagster.jobs.dispatch import dispatch_job
from msgx_dagster.jobs.pump import LONG_LIVED_TAGS, pump_job
from msgx_dagster.jobs.requests import HEARTBEAT, reference_refresh_job, request_tracking_job, snapshot_request_job
from msgx_dagster.orphans import STALE_S, end_dead_looping_run

AIRPORT_TZ = "Asia/Shanghai"
EVERY_MINUTE = "* * * * *"
SHADOW_SKIP = ("shadow mode (MSGX_MODE=shadow): this instance never sends requests to the AODB, "
               "so its request schedules stay off")


# Run monitoring fails a looping run still going this long after its start: a healthy one ends
# itself after LOOPING_RUN_S and one last round, so only a hung or orphaned run gets there (a slow
# backstop: the heartbeat has the schedule replace an orphaned run within two minutes).
LOOPING_MAX_RUNTIME_TAG = {"dagster/max_runtime": str(int(LOOPING_RUN_S + 300))}


def looping(context: dg.ScheduleEvaluationContext, job: dg.JobDefinition, op_name: str,
            heartbeat: str) -> dg.RunRequest | dg.SkipReason:
    """A run of ``job`` that repeats its round for LOOPING_RUN_S, unless one is still queued or
    running (P18): the minute tick then skips, and the next one after the run ends starts another.
    A STARTED run whose ``heartbeat`` says it is dead (its process is gone from this host, or it
    has not beaten for STALE_S) is failed first, and the tick starts its successor."""
    end_dead_looping_run(context, job.name, heartbeat)
    if active_runs(context.instance, job.name):
        return dg.SkipReason(f"a {job.name} run is still active (each loops for {LOOPING_RUN_S:.0f} s; "
                             f"one silent for {STALE_S:.0f} s is failed and replaced)")
    return dg.RunRequest(run_config=looping_run_config(op_name), tags=LOOPING_MAX_RUNTIME_TAG)


PUMP_DELIVERS = "the long-lived pump run delivers to Kafka with its inline dispatcher"
PUMP_MARKS = "the long-lived pump run marks the mailbox itself (inline backfill)"


def pump_covers(context: dg.ScheduleEvaluationContext) -> bool:
    """A long-lived pump run is queued or running: it dispatches and backfills inline."""
    return bool(active_runs(context.instance, pump_job.name, LONG_LIVED_TAGS))


@dg.schedule(name="dispatch_job_schedule", job=dispatch_job, cron_schedule=EVERY_MINUTE,
             default_status=dg.DefaultScheduleStatus.RUNNING,
             description="Starts dispatch_job every minute unless a dispatch run is still queued or running, "
                         "or the long-lived pump run delivers inline.")
def dispatch_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
    """A dispatch run lasts its 55 s plus at most one send's wait for delivery reports (the
    delivery timeout, 120 s by default), so during a broker outage a run can
    outlast the minute: the tick then skips instead of queueing runs that would pile up. While the
    long-lived pump run is active its inline dispatcher holds the dispatch lock, so a run would
    only start, find the lock taken and stop: the tick skips (a run start costs the pump's
    latency a few seconds of CPU); the schedule is the backstop once no pump runs."""
    if active_runs(context.instance, dispatch_job.name):
        return dg.SkipReason("a dispatch run is still queued or running")
    if pump_covers(context):
        return dg.SkipReason(PUMP_DELIVERS)
    return skip_if_stopped("no dispatch run (nothing is published from a stopped installation)") or dg.RunRequest()


@dg.schedule(name="backfill_job_schedule", job=backfill_job, cron_schedule=EVERY_MINUTE,
             default_status=dg.DefaultScheduleStatus.RUNNING,
             description="Starts backfill_job every minute unless the long-lived pump run marks inline.")
def backfill_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
    """The pump writes the marks of its own messages (inline backfill) and retries the due ones on
    every pass, so while the long-lived pump run is active the tick skips; the job marks what is
    due once no pump runs (US-09)."""
    if pump_covers(context):
        return dg.SkipReason(PUMP_MARKS)
    return skip_if_stopped("no backfill run (the mailbox is marked by the installation that holds the right)") \
        or dg.RunRequest()


NO_REFERENCE = (f"no reference to compare with ({ENV_AGAINST} is not set): this installation is not in a "
                "parallel run")


@dg.schedule(name="compare_job_schedule", job=compare_job, cron_schedule="0 * * * *",
             default_status=dg.DefaultScheduleStatus.RUNNING,
             description=f"Every hour: compare this installation's flights with the reference in {ENV_AGAINST} "
                         "and record the figures (parallel_run); in the 48 hours after this installation took "
                         "over in a cut-over, report that observation; skipped otherwise while no reference is set.")
def compare_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
    """The parallel run's record (docs/go-live.md): an installation that is not beside another has
    no reference, and its ticks skip saying so instead of failing every hour, except in the 48
    hours after it took the right over in a cut-over (OPS-4), when the run reports that watch."""
    if reference() is None and not observing():
        return dg.SkipReason(NO_REFERENCE)
    if active_runs(context.instance, compare_job.name):
        return dg.SkipReason("the previous comparison is still queued or running")
    return dg.RunRequest()


def request_schedule(job: dg.JobDefinition, cron: str, *, on: bool, shadow: bool,
                     timezone: str | None = None, loop_op: str | None = None,
                     description: str | None = None) -> dg.ScheduleDefinition:
    """A schedule that makes msgx talk to the AODB: off in shadow mode, and skipped with the reason
    should someone turn it on there. ``loop_op``: the job loops in that op, beating ``HEARTBEAT``
    (``looping``)."""
    status = dg.DefaultScheduleStatus.RUNNING if on and not shadow else dg.DefaultScheduleStatus.STOPPED

    @dg.schedule(name=f"{job.name}_schedule", job=job, cron_schedule=cron, execution_timezone=timezone,
                 default_status=status, description=description)
    def requests_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
        if shadow:
            return dg.SkipReason(SHADOW_SKIP)
        stopped = skip_if_stopped(f"no {job.name} run (a stopped installation sends nothing to the AODB)")
        if stopped is not None:
            return stopped
        return looping(context, job, loop_op, HEARTBEAT) if loop_op else dg.RunRequest()

    return requests_schedule


def schedules_for(*, shadow: bool) -> list[dg.ScheduleDefinition]:
    """The code location's schedules for its mode (production or shadow)."""
    return [
        # Archiving once a day in the quiet hours (US-11); the retention comes from MSGX_ARCHIVE_AFTER.
        dg.ScheduleDefinition(job=archive_job, cron_schedule="0 3 * * *", execution_timezone=AIRPORT_TZ,
                              default_status=dg.DefaultScheduleStatus.RUNNING,
                              description="Starts archive_job every day at 03:00 airport time."),
        backfill_schedule,
        dispatch_schedule,
        compare_schedule,
        request_schedule(request_tracking_job, EVERY_MINUTE, on=True, shadow=shadow, loop_op="request_tracking_op",
                         description="Starts request_tracking_job every minute unless one still runs; skipped "
                                     "in shadow mode."),
        # Tomorrow's day plan (RQFD) at 22:00; the AODB's SCHD RESP then replaces that day (US-06).
        request_schedule(snapshot_request_job, "0 22 * * *", on=True, shadow=shadow, timezone=AIRPORT_TZ,
                         description="Every day at 22:00 airport time: asks the AODB for tomorrow's flight plan; "
                                     "skipped in shadow mode."),
        # An RQRD per reference type daily; STOPPED until the reference line is in production (turn it on in the UI).
        request_schedule(reference_refresh_job, "30 3 * * *", on=False, shadow=shadow, timezone=AIRPORT_TZ,
                         description="Every day at 03:30 airport time: asks the AODB for every reference table; "
                                     "off until turned on; skipped in shadow mode."),
    ]
