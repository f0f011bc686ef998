"""projection_rebuild_job: rebuild the Redis projection flightInfo from PostgreSQL (D10, INV-24)."""

import dagster as dg

from msgx_dagster.assets.specs import PROJECTION
from msgx_dagster.jobs.common import materialize, singleton
from msgx_dagster.resources import MsgxResource
from msgx_engine.delivery.projection import REDIS_NOT_CONFIGURED


@dg.op(description="Replace the Redis projection with PostgreSQL's current flights (message processing "
                   "waits meanwhile).")
def projection_rebuild_op(context: dg.OpExecutionContext, msgx: MsgxResource) -> None:
    with msgx.open_app() as app:
        flights = app.rebuild_projection()
        if flights is None:
            context.log.info(REDIS_NOT_CONFIGURED)
            return
    materialize(context, PROJECTION, {"flights": flights, "rebuilt": True})


@dg.job(tags=singleton("projection"), executor_def=dg.in_process_executor,
        description="Rebuild the Redis hash flightInfo from PostgreSQL (after a Redis loss or drift).")
def projection_rebuild_job() -> None:
    projection_rebuild_op()
