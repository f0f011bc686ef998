"""pump_job: the single-run pump. With no run config it drains and exits (``dagster job execute``);
the inbox sensor starts it long-lived (idle-polls for minutes, exits before its max runtime)."""

import dagster as dg
from sqlalchemy import Engine

from msgx_dagster.assets.specs import FLIGHT_STATE, MAILBOX, OUTBOX, PROC_STATE
from msgx_dagster.jobs.common import materialize, singleton, stops_when_terminated
from msgx_dagster.resources import MsgxResource
from msgx_dagster.run_limits import warn_without_singleton_limit
from msgx_engine.delivery.runner import inline_dispatcher
from msgx_engine.handlers.reconcile import HEADLINE
from msgx_engine.monitor import backlog
from msgx_engine.pipeline.intake import StateBehindMailbox
from msgx_engine.pipeline.pump import PumpBusy, PumpOptions, PumpSummary
from msgx_engine.store.ledger import last_report_id, read_reports
from msgx_engine.store.queue import Status

LONG_LIVED_IDLE_S = 600.0


class SnapshotReports:
    """Each snapshot the pump applies becomes one FLIGHT_STATE materialization carrying its
    reconciliation's headline counts (read at heartbeats and at the end: one query each)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        with engine.connect() as conn:
            self.seen = last_report_id(conn)

    def report(self, context: dg.OpExecutionContext) -> None:
        with self.engine.connect() as conn:
            reports = read_reports(conn, after_msg_id=self.seen)
        for r in reports:
            materialize(context, FLIGHT_STATE, {"snapshot_msg_id": r["msg_id"],
                                                **{k: r[k] for k in HEADLINE if k in r}})
            self.seen = max(self.seen, int(r["msg_id"]))


class PumpConfig(dg.Config):
    idle_for_s: float = 0.0          # 0 = drain then exit
    idle_poll_s: float = 0.2
    max_runtime_s: float = 1800.0
    heartbeat_s: float = 15.0
    inline_dispatch: bool = True     # long-lived runs also deliver to Kafka from a thread


@dg.op(description="Take in new mailbox rows and process them one at a time in mailbox order, marking "
                   "each processed in the mailbox, until the mailbox is drained or idle.")
def pump_op(context: dg.OpExecutionContext, config: PumpConfig, msgx: MsgxResource) -> None:
    warn_without_singleton_limit(context)
    with stops_when_terminated(context) as terminated, msgx.open_app() as app:
        app.check_ready()
        reported = {"n": 0}
        snapshots = SnapshotReports(app.engine)

        def heartbeat(summary: PumpSummary) -> None:
            done = sum(summary.processed.values())
            if done != reported["n"]:
                materialize(context, PROC_STATE, summary.as_metadata())
                snapshots.report(context)
                reported["n"] = done

        try:
            with inline_dispatcher(app.settings, app.engine,
                                   enabled=config.inline_dispatch and config.idle_for_s > 0) as inline, \
                    app.release_notifier() as announce:
                # no inline dispatcher (a drain run): a dispatch_job run hears each release (P19, release NOTIFY)
                pump = app.pump(PumpOptions(idle_for_s=config.idle_for_s, idle_poll_s=config.idle_poll_s,
                                            max_runtime_s=config.max_runtime_s, heartbeat_s=config.heartbeat_s),
                                on_heartbeat=heartbeat, on_release=inline.wake if inline else announce,
                                should_stop=terminated.is_set)
                summary = pump.run()
        except (PumpBusy, StateBehindMailbox) as exc:
            raise dg.Failure(description=str(exc)) from exc
        left = backlog(app.engine, app.mailbox)
        meta = summary.as_metadata()
        context.log.info(f"pump finished: {meta}")
        materialize(context, MAILBOX, {"unregistered": left.unregistered, "top_id": left.top_mailbox_id,
                                       "backfill_pending": left.backfill_pending}, observe=True)
        materialize(context, PROC_STATE, {**meta, "open": left.open_messages, "dead_total": left.dead})
        snapshots.report(context)
        if summary.processed.get(Status.SUCCEEDED):
            materialize(context, FLIGHT_STATE, {"messages_applied": summary.processed[Status.SUCCEEDED]})
            materialize(context, OUTBOX, {"unsent_released_events": left.unsent_events})


@dg.job(tags=singleton("pump"), executor_def=dg.in_process_executor,
        description="Processes the mailbox's messages in the order the AODB wrote them. Only one pump "
                    "runs at a time; inbox_sensor starts it when work waits.")
def pump_job() -> None:
    pump_op()


# The sensor's long-lived pump runs carry this tag: while one is active it delivers to Kafka (its
# inline dispatcher) and marks the mailbox (inline backfill), so the minute schedules of
# dispatch_job and backfill_job skip instead of starting a run that has nothing to do. Each run
# start costs a few seconds of CPU, which on a 2-core machine the pump pays in latency.
LONG_LIVED_TAGS = {"msgx/long_lived_pump": "true"}


def long_lived_run_config() -> dict:
    return {"ops": {"pump_op": {"config": {"idle_for_s": LONG_LIVED_IDLE_S}}}}
