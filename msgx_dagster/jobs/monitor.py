"""The health checks as Dagster sees them, and monitor_job: one evaluation of every check, on demand.

The engine's ``Alerter`` does the work (figures, checks, ``alert_state``, ERROR log, optional
webhook ``MSGX_ALERT_WEBHOOK``); this module only turns its results into asset check evaluations on
the health assets (``assets/specs.py``). The health sensor (``sensors/health.py``) is what
evaluates every 30 s; ``monitor_job`` is the same evaluation launched by hand, from the Launchpad
or ``dagster job execute -j monitor_job`` (which needs no daemon): useful when the daemon, and
with it the sensor, is down. It has no schedule: a scheduled run would only repeat what the sensor
does, and cost a run start the pump pays for in latency.
"""


from typing import Any

import dagster as dg

from msgx_dagster.assets.specs import health_asset
from msgx_dagster.jobs.common import singleton
from msgx_dagster.resources import MsgxResource
from msgx_engine.monitor.alerts import Evaluation
from msgx_engine.monitor.checks import CheckResult
from msgx_engine.monitor.thresholds import HEALTH_INTERVAL


def dagster_check_name(name: str) -> str:
    return f"{name}_check"


def severity(result: CheckResult) -> dg.AssetCheckSeverity:
    """WARN for an operator's to-do (dead letters, unsupported types), ERROR for an outage."""
    return dg.AssetCheckSeverity.WARN if result.warn_only else dg.AssetCheckSeverity.ERROR


def metadata(result: CheckResult) -> dict[str, Any]:
    """The check's figures, and what the operator acts on (the dead letters) as a table."""
    meta: dict[str, Any] = dict(result.metadata)
    if result.rows:
        meta["waiting"] = dg.MetadataValue.table(records=[dg.TableRecord(dict(row)) for row in result.rows])
    return meta


def check_result(result: CheckResult) -> dg.AssetCheckResult:
    """A check clicked in the UI: its result inside the run that executes it."""
    return dg.AssetCheckResult(passed=result.passed, description=result.summary, metadata=metadata(result),
                               severity=severity(result))


def check_evaluation(result: CheckResult) -> dg.AssetCheckEvaluation:
    """An evaluation recorded outside a check's own execution (the sensor's, monitor_job's)."""
    return dg.AssetCheckEvaluation(asset_key=health_asset(result.name), check_name=dagster_check_name(result.name),
                                   passed=result.passed, description=result.summary, metadata=metadata(result),
                                   severity=severity(result))


def summary_line(evaluation: Evaluation) -> str:
    """The tick's (or run's) one log line: what fails, what changed, what was announced."""
    return (f"checks: failing {', '.join(evaluation.failing) or 'none'}; "
            f"changed {', '.join(evaluation.changed) or 'none'}"
            + (f"; rose {', '.join(evaluation.rose)}" if evaluation.rose else "")
            + (f"; announced {', '.join(evaluation.announced)}" if evaluation.announced else "")
            + (f"; webhook errors {evaluation.announce_errors}" if evaluation.announce_errors else ""))


@dg.op(description="Evaluate every health check once and alert (log ERROR, optional webhook) on each change.")
def monitor_op(context: dg.OpExecutionContext, msgx: MsgxResource) -> None:
    with msgx.open_app() as app:
        evaluation = app.alerter().evaluate()
    for r in evaluation.results:
        # log_event's annotation omits it, but it records an AssetCheckEvaluation (dagster 1.13)
        context.log_event(check_evaluation(r))  # type: ignore[arg-type]
    context.log.info(summary_line(evaluation))


@dg.job(tags=singleton("monitor"), executor_def=dg.in_process_executor,
        description="Evaluate every health check now and alert on changes, as the health sensor does every "
                    f"{HEALTH_INTERVAL.words}. For when the daemon (and with it the sensor) is down.")
def monitor_job() -> None:
    monitor_op()
