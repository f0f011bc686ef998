"""monitor_job: every health check evaluated every minute, alerts on state changes (OPS-2).

The engine's ``Alerter`` does the work (figures, checks, ``alert_state``, ERROR log, optional
webhook ``MSGX_ALERT_WEBHOOK``); this op only reports each result as an asset check evaluation, so
the Dagster UI shows the scheduled results on the same checks an operator can click. It runs as its
own singleton job, never inside the pump: a slow webhook delays this run, not processing. A
scheduled run evaluates every minute for just under ten minutes and the minute schedule skips while
it is active (P18): one run start per ten minutes instead of one per minute.
"""

import dagster as dg

from msgx_dagster.assets.specs import OUTBOX, PROC_STATE, PROJECTION, REQUESTS_OUT
from msgx_dagster.jobs.common import singleton
from msgx_dagster.resources import MsgxResource
from msgx_engine.clock import repeat_for
from msgx_engine.monitor.alerts import Evaluation
from msgx_engine.monitor.checks import CheckResult

# engine check name -> (asset the check describes, one-line description for the UI)
CHECK_ASSETS: dict[str, tuple[dg.AssetKey, str]] = {
    "backlog_age": (PROC_STATE, "The oldest open message is younger than the head deadline (10 min)."),
    "dead_letters": (PROC_STATE, "No dead letters wait for an operator."),
    "delivery_backlog": (OUTBOX, "No dead outbox events; the oldest undelivered released event is younger "
                                 "than 2 min."),
    "backfill_lag": (PROC_STATE, "Mailbox processed-marks are written within 5 min."),
    "projection_drift": (PROJECTION, "Redis flightInfo equals PostgreSQL's current flights (count and a sample "
                                     "of differing FLIDs)."),
    "unsupported_types": (PROC_STATE, "No message of an unsupported type in the last hour."),
    "request_timeouts": (REQUESTS_OUT, "The latest request of each kind did not time out unanswered."),
}


def dagster_check_name(name: str) -> str:
    return f"{name}_check"


def _fields(result: CheckResult) -> dict:
    return {"passed": result.passed, "description": result.summary, "metadata": dict(result.metadata),
            "severity": dg.AssetCheckSeverity.WARN if result.warn_only else dg.AssetCheckSeverity.ERROR}


def check_result(result: CheckResult) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(**_fields(result))


class MonitorConfig(dg.Config):
    run_for_s: float = 0.0    # 0 = one evaluation; the schedule's runs loop for LOOPING_RUN_S (P18)
    every_s: float = 60.0


@dg.op(description="Evaluate every health check (once, or every minute for the run's run_for_s); alert (log "
                   "ERROR, optional webhook) on each state change.")
def monitor_op(context: dg.OpExecutionContext, config: MonitorConfig, msgx: MsgxResource) -> None:
    with msgx.open_app() as app:
        alerter = app.alerter()
        rounds = repeat_for(config.run_for_s, config.every_s, lambda: report(context, alerter.evaluate()))
    if rounds > 1:
        context.log.info(f"monitor finished after {rounds} evaluations")


def report(context: dg.OpExecutionContext, evaluation: Evaluation) -> None:
    """Every check's result as an asset check evaluation, and one log line."""
    for r in evaluation.results:
        asset, _ = CHECK_ASSETS[r.name]
        # log_event's annotation omits it, but it records an AssetCheckEvaluation (dagster 1.13)
        context.log_event(dg.AssetCheckEvaluation(  # type: ignore[arg-type]
            asset_key=asset, check_name=dagster_check_name(r.name), **_fields(r)))
    context.log.info(f"checks: failing {evaluation.failing or 'none'}; changed {evaluation.changed or 'none'}; "
                     f"announced {evaluation.announced or 'none'}"
                     + (f"; webhook errors {evaluation.announce_errors}" if evaluation.announce_errors else ""))


@dg.job(tags=singleton("monitor"), executor_def=dg.in_process_executor,
        description="Every minute: evaluate the health checks and alert on state changes (OPS-2). A scheduled "
                    "run repeats that for just under ten minutes.")
def monitor_job() -> None:
    monitor_op()
