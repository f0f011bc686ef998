"""The operator's jobs for what waits for an operator, from the Launchpad. Never scheduled.

``acknowledge_job`` closes dead letters that need no replay, as ``msgx acknowledge`` does;
``outbox_revive_job`` sends dead outbox events again, as ``msgx outbox --apply`` does. Both call
the same engine functions, are recorded in the audit trail, and fail the run (with the reasons as
metadata) when the request is refused, so a refusal is a red run rather than a quiet one.
"""

from typing import Any

import dagster as dg

from msgx_dagster.assets.specs import OUTBOX, PROC_STATE
from msgx_dagster.jobs.common import materialize, singleton
from msgx_dagster.resources import MsgxResource
from msgx_engine.operations import outbox_ops
from msgx_engine.operations.acknowledge import acknowledge


class AcknowledgeConfig(dg.Config):
    ids: list[int] = []               # mailbox ids of dead or unsupported messages
    operator: str = ""                # who (audit trail)
    reason: str = ""                  # why they need no replay (audit trail)
    even_if_replayable: bool = False  # close replayable dead letters (DEAD exhausted/missing) too


class OutboxReviveConfig(dg.Config):
    ids: list[int] = []               # dead event ids, or:
    all_dead: bool = False            # every dead event
    operator: str = ""
    reason: str = ""


def _require(operator: str, reason: str) -> None:
    if not operator.strip() or not reason.strip():
        raise dg.Failure("operator and reason are required (they go into the audit trail)")


@dg.op(description="Close dead or unsupported messages that will not be replayed (audited).")
def acknowledge_op(context: dg.OpExecutionContext, config: AcknowledgeConfig, msgx: MsgxResource) -> None:
    _require(config.operator, config.reason)
    if not config.ids:
        raise dg.Failure("ids: give the mailbox ids to acknowledge")
    with msgx.open_app() as app:
        result = acknowledge(app.engine, config.ids, operator=config.operator, reason=config.reason,
                             now=app.clock.now(), even_if_replayable=config.even_if_replayable)
    context.log.info("acknowledge:\n" + "\n".join(result.lines()))
    metadata: dict[str, Any] = {"audit_id": result.audit_id, "acknowledged": len(result.acknowledged),
                                "messages": dg.MetadataValue.md("\n".join(f"- {line}" for line in result.lines()))}
    if not result.applied:
        raise dg.Failure("acknowledge refused, nothing changed: " + "; ".join(result.lines()),
                         metadata={**metadata, "refused_because": "; ".join(result.refused_because)})
    materialize(context, PROC_STATE, {"acknowledge": "apply", **metadata}, observe=True)


@dg.op(description="Send dead outbox events again, before the later events of their flight (audited).")
def outbox_revive_op(context: dg.OpExecutionContext, config: OutboxReviveConfig, msgx: MsgxResource) -> None:
    _require(config.operator, config.reason)
    if bool(config.ids) == config.all_dead:
        raise dg.Failure("choose the events: ids, or all_dead: true (not both)")
    with msgx.open_app() as app:
        result = outbox_ops.revive(app.engine, event_ids=config.ids, all_dead=config.all_dead,
                                   operator=config.operator, reason=config.reason)
    context.log.info("outbox revive:\n" + "\n".join(result.lines()))
    metadata: dict[str, Any] = {"audit_id": result.audit_id or 0, "revived": len(result.revived),
                                "events": dg.MetadataValue.json([outbox_ops.dead_json(ev) for ev in result.selected])}
    if not result.applied:
        raise dg.Failure("outbox revive refused, nothing revived: " + "; ".join(result.refused_because),
                         metadata={**metadata, "refused_because": "; ".join(result.refused_because)})
    materialize(context, OUTBOX, {"revive": "apply", **metadata}, observe=True)


@dg.job(tags=singleton("acknowledge"), executor_def=dg.in_process_executor,
        description="Close dead letters that need no replay: they leave the dead-letter count (audited).")
def acknowledge_job() -> None:
    acknowledge_op()


@dg.job(tags=singleton("outbox_revive"), executor_def=dg.in_process_executor,
        description="Send dead outbox events again, in order with their flight's later events (audited).")
def outbox_revive_job() -> None:
    outbox_revive_op()


JOBS = [acknowledge_job, outbox_revive_job]
