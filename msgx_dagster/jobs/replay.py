"""replay_job: the Launchpad as the operator's replay screen (US-10). Never scheduled.

The run config is the selection (ids, statuses, reasons) and the mode. A preview run shows what
a replay would do as run metadata and changes nothing; an apply run needs an operator and a
reason, is audited like ``msgx replay --apply``, and fails (with the reasons as metadata) when the
request is refused, so a refusal is a red run rather than a quiet one.
"""

from typing import Any, Literal

import dagster as dg

from msgx_dagster.assets.specs import PROC_STATE
from msgx_dagster.jobs.common import materialize, singleton
from msgx_dagster.resources import MsgxResource
from msgx_engine.operations.replay import Replayer, ReplayReport
from msgx_engine.store.queue_selection import Selection


class ReplayConfig(dg.Config):
    ids: list[int] = []
    statuses: list[str] = []          # DEAD, FAILED, SKIPPED
    reasons: list[str] = []           # reason or error class: exhausted, missing, unsupported, INFRA, ...
    mode: Literal["preview", "apply"] = "preview"
    operator: str = ""                # apply: who (audited)
    reason: str = ""                  # apply: why (audited)
    force_stale: str = ""             # apply: why flights changed by later messages may be overwritten


def report_metadata(report: ReplayReport) -> dict[str, Any]:
    return {**report.summary(), "messages": dg.MetadataValue.json([i.as_json() for i in report.items]),
            "preview": dg.MetadataValue.md("```\n" + "\n".join(report.lines()) + "\n```")}


@dg.op(description="Preview or apply a replay of the selected failed messages (audited).")
def replay_op(context: dg.OpExecutionContext, config: ReplayConfig, msgx: MsgxResource) -> None:
    sel = Selection(ids=tuple(config.ids), statuses=tuple(config.statuses), reasons=tuple(config.reasons))
    if sel.empty:
        raise dg.Failure("a selection is required (ids, statuses or reasons): there is no replay of everything")
    with msgx.open_app() as app:
        replayer = Replayer(app.engine, app.mailbox, max_body_bytes=app.settings.max_body_bytes)
        if config.mode == "preview":
            report = replayer.preview(sel)
            context.log.info("replay preview:\n" + "\n".join(report.lines()))
            materialize(context, PROC_STATE, {"replay": "preview", **report_metadata(report)}, observe=True)
            return
        if not config.operator.strip() or not config.reason.strip():
            raise dg.Failure("mode apply needs operator and reason")
        result = replayer.apply(sel, operator=config.operator, reason=config.reason, now=app.clock.now(),
                                force_stale=config.force_stale or None)
    context.log.info("replay apply:\n" + "\n".join(result.report.lines()))
    metadata: dict[str, Any] = {"replay": "apply", "audit_id": result.audit_id, "requeued": len(result.requeued),
                **report_metadata(result.report)}
    if not result.applied:
        raise dg.Failure("replay refused, nothing re-queued: " + "; ".join(result.refused_because),
                         metadata={**metadata, "refused_because": "; ".join(result.refused_because)})
    materialize(context, PROC_STATE, metadata, observe=True)


@dg.job(tags=singleton("replay"), executor_def=dg.in_process_executor,
        description="Replay failed messages: preview (default) or apply with operator and reason (audited).")
def replay_job() -> None:
    replay_op()
