"""inbox_sensor: requests a pump run only when there is processable work and no pump run is
queued or in flight (the queue would otherwise pile up runs). Explicit SkipReason otherwise."""


import dagster as dg

from msgx_dagster.jobs.common import active_runs
from msgx_dagster.jobs.pump import LONG_LIVED_TAGS, long_lived_run_config, pump_job
from msgx_dagster.resources import MsgxResource
from msgx_engine.monitor import backlog


@dg.sensor(job=pump_job, minimum_interval_seconds=5, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Starts the long-lived pump when the mailbox has work and no pump runs.")
def inbox_sensor(context: dg.SensorEvaluationContext, msgx: MsgxResource):
    if active_runs(context.instance, pump_job.name):
        return dg.SkipReason("a pump run is already queued or running")
    with msgx.open_app() as app:
        work = backlog(app.engine, app.mailbox, probe_limit=1)
    if not work.processable:
        return dg.SkipReason("no processable mailbox rows, open messages or pending marks")
    serial = int(context.cursor or 0) + 1
    context.update_cursor(str(serial))
    return dg.RunRequest(run_key=f"pump-{serial}", run_config=long_lived_run_config(),
                         tags={"msgx/top_mailbox_id": str(work.top_mailbox_id), **LONG_LIVED_TAGS})
