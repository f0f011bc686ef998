"""Every asset check: one per engine health check (``msgx_engine.monitor.checks.CHECKS``), each on
its health asset (``assets/specs.py``), built over the engine's list so a new check appears here
without an edit. The health sensor records their evaluations every 30 s (with alerting); clicking
one in the UI evaluates it now, without touching the alert state.

Each description says what a failure means in words and the first command to run, because that is
what an operator reads under a red check; the evaluation's own description carries the figures.
"""

from __future__ import annotations

import inspect

import dagster as dg

from msgx_dagster.assets.specs import health_asset
from msgx_dagster.jobs.monitor import check_result, dagster_check_name
from msgx_dagster.resources import MsgxResource
from msgx_engine.monitor.checks import CHECKS as ENGINE_CHECKS

RUNBOOK = "docs/runbook.md"

# check -> (what a failure means and what to run first, runbook section)
DESCRIPTIONS: dict[str, tuple[str, str]] = {
    "pipeline_liveness": (
        "Fails when work waits in the mailbox or the queue and no pump is alive: the inbox sensor is stopped, "
        "the Dagster daemon is down, pump runs fail as they start, or a pump was killed. First run "
        "`msgx status`; then in Dagster check that inbox_sensor is running and read the latest pump_job run.",
        "pipeline-stalled"),
    "backlog_age": (
        "Fails when the oldest open message has waited 10 minutes or more: the pump is stopped, stuck on that "
        "message, or waiting for Redis. First run `msgx status`, then read the pump_job run's log.",
        "backlog-age"),
    "dead_letters": (
        "Fails while dead letters wait for an operator: messages that could not be processed (malformed, an "
        "infrastructure fault, retries exhausted). The result lists them. First run `msgx replay --status DEAD` "
        "to preview their replay; `msgx acknowledge ID --operator NAME --reason TEXT` closes one that need "
        "not be replayed.",
        "dead-letters"),
    "delivery_backlog": (
        "Fails when an outbox event was given up (dead) or a released event has waited 2 minutes or more for "
        "Kafka: Kafka is down or slow. First run `msgx outbox` to see the waiting and dead events; "
        "`msgx dispatch --drain` delivers now.",
        "delivery-backlog"),
    "backfill_lag": (
        "Fails when a mailbox processed-mark is still unwritten after 5 minutes: the mailbox refuses the "
        "writes, or neither a pump nor backfill_job runs. First run `msgx status`, then read the latest "
        "backfill_job or pump_job run's log.",
        "backfill-lag"),
    "projection_drift": (
        "Fails when the Redis flightInfo projection differs from the flight state in PostgreSQL, or Redis "
        "cannot be read (passes when no Redis is configured). First check that Redis answers "
        "(`redis-cli -u $MSGX_REDIS_URL ping`), then launch projection_rebuild_job.",
        "projection-drift"),
    "unsupported_types": (
        "Fails when a message of a type msgx does not support arrived in the last hour; the result names the "
        "TYPE-STYP. First run `msgx replay --status SKIPPED --reason unsupported` to preview them; replay "
        "once the type is supported, or acknowledge them.",
        "unsupported-types"),
    "request_timeouts": (
        "Fails when the newest request of some kind to the AODB (day plan, reference data) timed out "
        "unanswered; it clears when a later one is answered. First run `msgx status`, then ask the AODB side "
        "whether it reads COUTMSGS; `msgx request track` sends what is registered.",
        "request-timeouts"),
    "stand_mapping": (
        "Fails when a live flight's stand has no entry in the stand -> airbridge mapping (ABDG reference "
        "data), because the mapping was never loaded or lacks that stand, so the flight publishes its "
        "airbridges as null. First run "
        "`msgx request rqrd ABDG` to ask the AODB for the mapping again.",
        "stand-mapping"),
}


def description(name: str) -> str:
    """The UI text of a check; a check added to the engine without one here gets its docstring."""
    text, anchor = DESCRIPTIONS.get(name, ("", ""))
    if not text:
        doc = inspect.getdoc(ENGINE_CHECKS[name]) or f"The {name} health check."
        return f"{doc} First run `msgx status`."
    return f"{text} Runbook: {RUNBOOK}#{anchor}."


def engine_check(name: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=health_asset(name), name=dagster_check_name(name), description=description(name))
    def _check(msgx: MsgxResource) -> dg.AssetCheckResult:
        with msgx.open_app() as app:
            return check_result(app.check(name))

    return _check


CHECK_DEFS: dict[str, dg.AssetChecksDefinition] = {name: engine_check(name) for name in ENGINE_CHECKS}
CHECKS = list(CHECK_DEFS.values())
