"""health_sensor: every health check evaluated every ``HEALTH_INTERVAL``, each result recorded on its
health asset.

Why a sensor and not a scheduled job: a sensor tick runs in the code server the daemon already
talks to, so evaluating costs no run start (seconds of CPU the pump pays in latency), and its
asset events are recorded by the daemon as they come (``SensorResult(asset_events=...)``, one
``AssetCheckEvaluation`` per failing or changed check per tick, and per passing one every
``HEALTH_REFRESH``; both in ``msgx_engine.monitor.thresholds``). The checks sit on health assets
nothing materializes, so each recorded result is what the UI shows until the next one (see
``assets/specs.py``).

The engine's ``Alerter`` decides and alerts (log, webhook) as it does everywhere; this sensor only
adds what Dagster alone knows to the pipeline liveness result: whether ``inbox_sensor`` was
stopped and how the latest pump run ended, the two causes an operator looks for first. When the
state database cannot be read at all, every check is recorded failed with that reason: a check
that keeps its last green result while nothing can be measured would hide the outage.

The daemon evaluates sensors in threads (``sensors: use_threads`` in ``deploy/dagster.yaml``), so a
slow evaluation here (a webhook timing out, a large projection comparison) never delays
``inbox_sensor``.
"""


import dataclasses
import json
import time
from collections.abc import Mapping, Sequence

import dagster as dg

from msgx_dagster.jobs.monitor import check_evaluation, summary_line
from msgx_dagster.jobs.pump import pump_job
from msgx_dagster.resources import MsgxResource
from msgx_engine.monitor import names
from msgx_engine.monitor.checks import CHECKS, CheckResult
from msgx_engine.monitor.thresholds import HEALTH_INTERVAL, HEALTH_REFRESH
from msgx_engine.redact import safe_text

HEALTH_INTERVAL_S = int(HEALTH_INTERVAL.seconds)
REFRESH_S = HEALTH_REFRESH.seconds     # a passing, unchanged result is recorded again at least this often
LIVENESS = names.PIPELINE_LIVENESS
INBOX_SENSOR = "inbox_sensor"


def inbox_sensor_stopped(instance: dg.DagsterInstance) -> bool:
    """An operator stopped inbox_sensor (a sensor running by default stores a state only when toggled).
    Compared by value: Dagster exports no public name for the instigator enums."""
    return any(s.name == INBOX_SENSOR and s.instigator_type.value == "SENSOR" and s.status.value == "STOPPED"
               for s in instance.all_instigator_state())


def latest_pump_run(instance: dg.DagsterInstance) -> dg.RunRecord | None:
    records = instance.get_run_records(filters=dg.RunsFilter(job_name=pump_job.name), limit=1)
    return records[0] if records else None


def dagster_facts(instance: dg.DagsterInstance) -> tuple[dict[str, str], list[str]]:
    """(metadata, causes in words) about the pump as Dagster sees it."""
    stopped = inbox_sensor_stopped(instance)
    meta = {"inbox_sensor": "stopped" if stopped else "running"}
    causes = [f"{INBOX_SENSOR} is stopped: turn it on under Automation"] if stopped else []
    record = latest_pump_run(instance)
    if record is None:
        meta["latest_pump_run"] = "none"
        return meta, causes
    status = record.dagster_run.status
    meta["latest_pump_run"] = f"{status.value} {record.dagster_run.run_id}"
    if status == dg.DagsterRunStatus.FAILURE:
        causes.append(f"the latest pump_job run {record.dagster_run.run_id[:8]} failed: read its log")
    return meta, causes


def with_dagster_facts(result: CheckResult, meta: Mapping[str, str], causes: list[str]) -> CheckResult:
    """The Dagster causes lead: they are the concrete thing to fix ("inbox_sensor is stopped")."""
    summary = result.summary if result.passed or not causes else f"{'; '.join(causes)}. {result.summary}"
    return dataclasses.replace(result, summary=summary, metadata={**result.metadata, **meta})


def last_recorded(cursor: str | None) -> dict[str, tuple[bool, float]]:
    """check -> (passed, when) of its last recorded evaluation, from the sensor's cursor (unreadable: none)."""
    try:
        stored = json.loads(cursor or "{}")
        return {str(name): (bool(v[0]), float(v[1])) for name, v in stored.items()}
    except (ValueError, TypeError, AttributeError, IndexError, KeyError):
        return {}


def worth_recording(results: Sequence[CheckResult], cursor: str | None,
                    now: float) -> tuple[list[CheckResult], str]:
    """The results this tick records, and the next cursor. Every failing result is recorded (its
    figures are what the operator reads), and every change; a passing result that stayed passing is
    recorded again once REFRESH_S has gone by, so its timestamp in the UI says the sensor is alive.
    Each event costs milliseconds of instance storage and is never pruned: nine checks every 30 s
    would be 26,000 a day, mostly repeating "passed"."""
    last = last_recorded(cursor)
    chosen: list[CheckResult] = []
    for r in results:
        seen = last.get(r.name)
        if not r.passed or seen is None or seen[0] != r.passed or now - seen[1] >= REFRESH_S:
            chosen.append(r)
            last[r.name] = (r.passed, now)
    return chosen, json.dumps({name: list(v) for name, v in sorted(last.items())})


def unmeasured(error: str) -> list[CheckResult]:
    """Every check failed because nothing could be measured (the state database did not answer)."""
    text = (f"not evaluated: msgx's state database could not be read ({error}). First run `msgx status`; "
            "runbook: docs/runbook.md#database-unreachable")
    return [CheckResult(name, False, text, None, {"error": error}) for name in CHECKS]


@dg.sensor(name="health_sensor", minimum_interval_seconds=HEALTH_INTERVAL_S,
           default_status=dg.DefaultSensorStatus.RUNNING,
           description=f"Every {HEALTH_INTERVAL.words}: evaluates every health check and alerts on changes "
                       "(log, webhook); records each failing or changed result on its health asset (group "
                       f"health), a passing one at least every {HEALTH_REFRESH.words}. Turning it off leaves the "
                       "checks showing their last result.")
def health_sensor(context: dg.SensorEvaluationContext, msgx: MsgxResource) -> dg.SensorResult:
    try:
        with msgx.open_app() as app:
            evaluation = app.alerter().evaluate()
    except Exception as exc:  # noqa: BLE001 - an outage must show on the checks, not only in the tick log
        error = safe_text(f"{exc.__class__.__name__}: {exc}", 300)
        context.log.error(f"health checks not evaluated: {error}")
        recorded, cursor = worth_recording(unmeasured(error), context.cursor, time.time())
        return dg.SensorResult(asset_events=[check_evaluation(r) for r in recorded], cursor=cursor,
                               skip_reason=f"not evaluated: {error}")
    results = evaluation.results
    if any(r.name == LIVENESS for r in results):
        meta, causes = dagster_facts(context.instance)
        results = [with_dagster_facts(r, meta, causes) if r.name == LIVENESS else r for r in results]
    recorded, cursor = worth_recording(results, context.cursor, time.time())
    line = summary_line(evaluation)
    context.log.info(line)
    return dg.SensorResult(asset_events=[check_evaluation(r) for r in recorded], cursor=cursor, skip_reason=line)
