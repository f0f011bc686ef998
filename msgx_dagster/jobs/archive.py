"""archive_job: the daily archiving run (US-11), the same code as ``msgx archive``; counts per
table as run metadata. Retention from MSGX_ARCHIVE_AFTER unless the run config overrides it."""

import dagster as dg

from msgx_dagster.assets.specs import PROC_STATE
from msgx_dagster.jobs.common import materialize, singleton
from msgx_dagster.resources import MsgxResource
from msgx_engine.config import parse_duration


class ArchiveConfig(dg.Config):
    older_than: str = ""          # e.g. "2d"; empty: MSGX_ARCHIVE_AFTER (1d-7d, default 1d)
    dry_run: bool = False
    batch: int = 1000


@dg.op(description="Archive finished messages, retire and purge old flights, drop old snapshot records.")
def archive_op(context: dg.OpExecutionContext, config: ArchiveConfig, msgx: MsgxResource) -> None:
    older_than = parse_duration(config.older_than, name="older_than") if config.older_than else None
    with msgx.open_app() as app:
        policy = app.archive_policy(older_than, batch=config.batch)
        report = app.archiver().run(policy, dry_run=config.dry_run, operator=f"archive_job:{context.run_id[:8]}",
                                    reason=f"retention {policy.older_than}")
    context.log.info("archive:\n" + "\n".join(report.lines()))
    materialize(context, PROC_STATE, {"dry_run": report.dry_run, "batches": report.batches,
                                      "projection_errors": report.projection_errors,
                                      "audit_id": report.audit_id or 0, **report.counts,
                                      **{f"kept_{why}": n for why, n in report.kept.items()}}, observe=True)


@dg.job(tags=singleton("archive"), executor_def=dg.in_process_executor,
        description="Daily archiving: moves finished messages, old flights and old snapshot records out of "
                    "the working tables, after the retention MSGX_ARCHIVE_AFTER.")
def archive_job() -> None:
    archive_op()
