"""Every schedule. Cron is minute-granular: the jobs that must act every few seconds loop inside
one run for just under a minute (their run config) and are started every minute (DESIGN §5);
the daily request jobs run on airport local time."""

import dagster as dg

from msgx_dagster.jobs.archive import archive_job
from msgx_dagster.jobs.backfill import backfill_job
from msgx_dagster.jobs.dispatch import dispatch_job
from msgx_dagster.jobs.monitor import monitor_job
from msgx_dagster.jobs.requests import reference_refresh_job, request_tracking_job, snapshot_request_job

AIRPORT_TZ = "Asia/Shanghai"


def every_minute(job: dg.JobDefinition) -> dg.ScheduleDefinition:
    """A looping job started every minute; on by default."""
    return dg.ScheduleDefinition(job=job, cron_schedule="* * * * *",
                                 default_status=dg.DefaultScheduleStatus.RUNNING)


backfill_schedule = every_minute(backfill_job)
dispatch_schedule = every_minute(dispatch_job)
request_tracking_schedule = every_minute(request_tracking_job)
# The health checks every minute, alerting on state changes (OPS-2): not only when someone clicks them.
monitor_schedule = every_minute(monitor_job)
# Tomorrow's day plan (RQFD) at 22:00; the AODB's SCHD RESP then replaces that day (US-06).
snapshot_request_schedule = dg.ScheduleDefinition(job=snapshot_request_job, cron_schedule="0 22 * * *",
                                                  execution_timezone=AIRPORT_TZ,
                                                  default_status=dg.DefaultScheduleStatus.RUNNING)
# An RQRD per reference type daily; STOPPED until the reference line is in production (turn it on in the UI).
reference_refresh_schedule = dg.ScheduleDefinition(job=reference_refresh_job, cron_schedule="30 3 * * *",
                                                   execution_timezone=AIRPORT_TZ,
                                                   default_status=dg.DefaultScheduleStatus.STOPPED)

# Archiving once a day in the quiet hours (US-11); the retention comes from MSGX_ARCHIVE_AFTER.
archive_schedule = dg.ScheduleDefinition(job=archive_job, cron_schedule="0 3 * * *", execution_timezone=AIRPORT_TZ,
                                         default_status=dg.DefaultScheduleStatus.RUNNING)

SCHEDULES = [archive_schedule, backfill_schedule, dispatch_schedule, monitor_schedule, request_tracking_schedule,
             snapshot_request_schedule, reference_refresh_schedule]
