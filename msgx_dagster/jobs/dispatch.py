"""dispatch_job: the Kafka dispatcher for just under a minute (run config), scheduled every minute (US-07).

Run concurrency one (``singleton: dispatch``) plus the dispatcher's PostgreSQL advisory lock: when
another dispatcher holds it (the pump's inline one, or a manual ``msgx dispatch``) the run skips.
Asset events per heartbeat, never per record: the topics' sent counts and the outbox's lag.
"""

from datetime import UTC, datetime

import dagster as dg

from msgx_dagster.assets.specs import KAFKA_MSG, KAFKA_SCHD, OUTBOX
from msgx_dagster.jobs.common import materialize, singleton, stops_when_terminated
from msgx_dagster.resources import MsgxResource
from msgx_engine.delivery.dispatcher import DispatcherBusy, DispatchOptions, DispatchSummary
from msgx_engine.delivery.runner import KAFKA_NOT_CONFIGURED, build_dispatcher
from msgx_engine.store import outbox


class DispatchConfig(dg.Config):
    run_for_s: float = 55.0   # just under the one-minute schedule; 0 = drain what is due, then exit
    poll_s: float = 0.1
    heartbeat_s: float = 15.0


def outbox_figures(engine) -> dict[str, float | int]:
    with engine.connect() as conn:
        unsent = outbox.unsent_count(conn)
        oldest = outbox.oldest_unsent_released_at(conn)
        dead = outbox.dead_count(conn)
    lag = (datetime.now(UTC) - oldest).total_seconds() if oldest else 0.0
    return {"unsent_released_events": unsent, "oldest_unsent_age_s": round(max(lag, 0.0), 3), "dead_events": dead}


@dg.op(description="Send the outbox's events to the Kafka topics msg and schd for just under a minute.")
def dispatch_op(context: dg.OpExecutionContext, config: DispatchConfig, msgx: MsgxResource) -> None:
    with stops_when_terminated(context) as terminated, msgx.open_app() as app:
        if not app.settings.kafka_bootstrap:
            context.log.info(f"dispatch: {KAFKA_NOT_CONFIGURED}")
            return
        reported = DispatchSummary()

        def report(summary: DispatchSummary) -> None:
            if summary.msg_sent != reported.msg_sent:
                materialize(context, KAFKA_MSG, {"records_sent": summary.msg_sent - reported.msg_sent})
            if summary.schd_records != reported.schd_records:
                materialize(context, KAFKA_SCHD, {"records_sent": summary.schd_records - reported.schd_records,
                                                  "events_covered": summary.schd_events - reported.schd_events})
            if (summary.msg_sent, summary.schd_events, summary.failed) != (
                    reported.msg_sent, reported.schd_events, reported.failed):
                materialize(context, OUTBOX, outbox_figures(app.engine), observe=True)
            reported.msg_sent, reported.schd_records = summary.msg_sent, summary.schd_records
            reported.schd_events, reported.failed = summary.schd_events, summary.failed

        options = DispatchOptions(run_for_s=config.run_for_s, poll_s=config.poll_s, heartbeat_s=config.heartbeat_s)
        try:
            summary = build_dispatcher(app.settings, app.engine, options=options, on_heartbeat=report,
                                       should_stop=terminated.is_set).run()
        except DispatcherBusy as exc:
            context.log.info(f"dispatch skipped: {exc}")
            return
        report(summary)
        context.log.info(f"dispatch finished: {summary.as_metadata()}")


@dg.job(tags=singleton("dispatch"), executor_def=dg.in_process_executor,
        description="Deliver the outbox's events to Kafka: topic msg gets one record per flight change, "
                    "topic schd the latest whole state of each changed flight.")
def dispatch_job() -> None:
    dispatch_op()
