"""Every asset check: one per engine health check (``msgx_engine.monitor.checks.CHECKS``), each on
its health asset (``assets/specs.py``), built over the engine's list so a new check appears here
without an edit. The health sensor records their evaluations (with alerting); clicking
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
from msgx_engine.monitor import names
from msgx_engine.monitor.checks import CHECKS as ENGINE_CHECKS
from msgx_engine.monitor.status import RUNBOOK, anchor
from msgx_engine.monitor.thresholds import BACKFILL_AGE, HEAD_AGE, UNSENT_AGE, UNSUPPORTED_WINDOW, WORK_GRACE

# check -> what a failure means and what to run first; the limits come from the engine's table
DESCRIPTIONS: dict[str, str] = {
    names.PIPELINE_LIVENESS: (
        f"Fails when work has waited in the mailbox or the queue for {WORK_GRACE.words} or more and no pump is "
        "alive: the inbox sensor is stopped, the Dagster daemon is down, pump runs fail as they start, or a "
        "pump was killed. Passes while this installation's writes are stopped for a cut-over (no pump runs "
        "there by design), saying so in its result. First run `msgx status`; then in Dagster check that "
        "inbox_sensor is running and read the latest pump_job run."),
    names.BACKLOG_AGE: (
        f"Fails when the oldest open message has waited {HEAD_AGE.words} or more: the pump is stopped, stuck on "
        "that message, or waiting for Redis. Passes while this installation's writes are stopped for a cut-over "
        "(the open messages are the other installation's), saying so. First run `msgx status`, then read the "
        "pump_job run's log."),
    names.DEAD_LETTERS: (
        "Fails while dead letters wait for an operator: messages that could not be processed (malformed, an "
        "infrastructure fault, retries exhausted). The result lists them. First run `msgx replay --status DEAD` "
        "to preview their replay; `msgx acknowledge ID --operator NAME --reason TEXT` closes one that need "
        "not be replayed."),
    names.DELIVERY_BACKLOG: (
        f"Fails when an outbox event was given up (dead) or a released event has waited {UNSENT_AGE.words} or "
        "more for Kafka: Kafka is down or slow. First run `msgx outbox` to see the waiting and dead events; "
        "`msgx dispatch --drain` delivers now."),
    names.BACKFILL_LAG: (
        f"Fails when a mailbox processed-mark is still unwritten after {BACKFILL_AGE.words}: the mailbox refuses "
        "the writes, or neither a pump nor backfill_job runs. First run `msgx status`, then read the latest "
        "backfill_job or pump_job run's log."),
    names.PROJECTION_DRIFT: (
        "Fails when the Redis flightInfo projection differs from the flight state in PostgreSQL, or Redis "
        "cannot be read (passes when no Redis is configured). First check that Redis answers "
        "(`redis-cli -u $MSGX_REDIS_URL ping`), then launch projection_rebuild_job."),
    names.UNSUPPORTED_TYPES: (
        f"Fails when a message of a type msgx does not support arrived less than {UNSUPPORTED_WINDOW.words} "
        "ago; the result names the TYPE-STYP. First run `msgx replay --status SKIPPED --select-reason "
        "unsupported` to preview them; replay once the type is supported, or acknowledge them."),
    names.REQUEST_TIMEOUTS: (
        "Fails when the newest request of some kind to the AODB (day plan, reference data) timed out "
        "unanswered; it clears when a later one is answered. First run `msgx status`, then ask the AODB side "
        "whether it reads COUTMSGS; `msgx request track` sends what is registered."),
    names.STAND_MAPPING: (
        "Fails when a live flight's stand has no entry in the stand -> airbridge mapping (ABDG reference "
        "data), because the mapping was never loaded or lacks that stand, so the flight publishes its "
        "airbridges as null. First run `msgx request rqrd ABDG` to ask the AODB for the mapping again."),
}


def description(name: str) -> str:
    """The UI text of a check; a check added to the engine without one here gets its docstring."""
    text = DESCRIPTIONS.get(name)
    if not text:
        doc = inspect.getdoc(ENGINE_CHECKS[name]) or f"The {name} health check."
        return f"{doc} First run `msgx status`."
    return f"{text} Runbook: {RUNBOOK}#{anchor(name)}."


def engine_check(name: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=health_asset(name), name=dagster_check_name(name), description=description(name))
    def _check(msgx: MsgxResource) -> dg.AssetCheckResult:
        with msgx.open_app() as app:
            return check_result(app.check(name))

    return _check


CHECK_DEFS: dict[str, dg.AssetChecksDefinition] = {name: engine_check(name) for name in ENGINE_CHECKS}
CHECKS = list(CHECK_DEFS.values())
