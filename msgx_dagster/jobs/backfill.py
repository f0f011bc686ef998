"""backfill_job: writes CMINMSGS_DATE_PROCESSED for terminal messages (US-09), on a schedule."""


import dagster as dg

from msgx_dagster.assets.specs import MAILBOX
from msgx_dagster.jobs.common import every_minute, materialize, singleton
from msgx_dagster.resources import MsgxResource
from msgx_engine.pipeline.backfill import run_backfill


@dg.op(description="Mark every due backfill todo in the mailbox; MySQL outages back off and retry.")
def backfill_op(context: dg.OpExecutionContext, msgx: MsgxResource) -> None:
    app = msgx.app()
    try:
        stats = run_backfill(app.engine, app.mailbox, app.clock, max_seconds=50.0)
        materialize(context, MAILBOX, {"marked": stats.marked, "already_marked": stats.already,
                                       "missing": stats.missing, "failed_attempts": stats.failed_attempts,
                                       "pending": stats.pending},
                    observe=True)
    finally:
        app.dispose()


@dg.job(tags=singleton("backfill"), executor_def=dg.in_process_executor)
def backfill_job() -> None:
    backfill_op()


backfill_schedule = every_minute(backfill_job)
