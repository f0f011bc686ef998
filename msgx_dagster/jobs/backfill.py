"""backfill_job: writes CMINMSGS_DATE_PROCESSED for terminal messages (US-09); scheduled every minute."""

import dagster as dg

from msgx_dagster.assets.specs import MAILBOX
from msgx_dagster.jobs.common import materialize, singleton
from msgx_dagster.resources import MsgxResource
from msgx_engine.pipeline.backfill import run_backfill


class BackfillConfig(dg.Config):
    max_seconds: float = 50.0     # just under the one-minute schedule


@dg.op(description="Write every due processed-mark into the mailbox; while the mailbox does not answer, "
                   "wait and try again.")
def backfill_op(context: dg.OpExecutionContext, config: BackfillConfig, msgx: MsgxResource) -> None:
    with msgx.open_app() as app:
        stats = run_backfill(app.engine, app.mailbox, app.clock, max_seconds=config.max_seconds)
    materialize(context, MAILBOX, {"marked": stats.marked, "already_marked": stats.already,
                                   "missing": stats.missing, "failed_attempts": stats.failed_attempts,
                                   "pending": stats.pending},
                observe=True)


@dg.job(tags=singleton("backfill"), executor_def=dg.in_process_executor,
        description="Mark processed messages as processed in the mailbox (CMINMSGS_DATE_PROCESSED), for "
                    "when no long-lived pump does it as it goes.")
def backfill_job() -> None:
    backfill_op()
