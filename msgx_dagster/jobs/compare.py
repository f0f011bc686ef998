"""compare_job: one comparison of the parallel run, recorded twice.

In the installation that runs beside production (usually the shadow), the hourly schedule runs
``msgx compare`` against the reference named by ``MSGX_COMPARE_AGAINST`` (with the
known-differences file ``MSGX_COMPARE_KNOWN`` and the Redis hash ``MSGX_COMPARE_KEY``, when set).
Each report is recorded:

- as a materialization of the ``parallel_run`` asset whose numeric metadata (unexplained and
  explained differences, missing here and there, the dead-letter backlog, the oldest undelivered
  event's dwell) Dagster plots over time, with the markdown report attached;
- in msgx's own database (``store.parallel_run``), where ``msgx compare --summary`` reads it.

A comparison that cannot read a side is recorded with its reason and fails the run, so it shows
red in the UI; differences do not fail the run: they are the figures being recorded.

The dead-letter backlog and the oldest undelivered event's wait it records are the worst of the
hour before it (what the health tick folded in every 30 s, ``store.parallel_run``) and of this
moment, not a sample taken once an hour.

In the 48 hours after this installation took the right over in a cut-over (``msgx cutover
promote``, or a rollback to it; OPS-4) each run also reports that observation on the asset: the
worst of every hour so far, watching / passed / failed, and until when rollback stays possible.
Without a reference (the promoted installation's usual configuration) the run reports only that.
"""


import os
from pathlib import Path
from typing import Any

import dagster as dg

from msgx_dagster.assets.specs import PARALLEL_RUN
from msgx_dagster.jobs.common import materialize, singleton
from msgx_dagster.resources import MsgxResource
from msgx_engine.compare import observation, summary
from msgx_engine.compare.run import EXIT_UNREADABLE, run
from msgx_engine.monitor.figures import Figures, figures
from msgx_engine.redact import redact_urls
from msgx_engine.store import parallel_run

ENV_AGAINST = "MSGX_COMPARE_AGAINST"
ENV_KNOWN = "MSGX_COMPARE_KNOWN"
ENV_KEY = "MSGX_COMPARE_KEY"


class CompareConfig(dg.Config):
    against: str = ""     # empty: MSGX_COMPARE_AGAINST (keeps a password out of the run config)
    known: str = ""       # empty: MSGX_COMPARE_KNOWN; neither: every difference is unexplained
    key: str = ""         # empty: MSGX_COMPARE_KEY; neither: flightInfo (a redis:// reference only)


def reference() -> str | None:
    """The reference URL the schedule and the run read from the environment (None: unset)."""
    return (os.environ.get(ENV_AGAINST) or "").strip() or None


def plotted(doc: dict[str, Any]) -> dict[str, Any]:
    """The recorded figures as the numeric metadata Dagster plots."""
    return {
        "unexplained_differences": dg.MetadataValue.int(int(doc["unexplained"])),
        "explained_differences": dg.MetadataValue.int(int(doc["explained"])),
        "missing_here": dg.MetadataValue.int(int(doc["missing_here"])),
        "missing_there": dg.MetadataValue.int(int(doc["missing_there"])),
        "fields_differing": dg.MetadataValue.int(int(doc["differs"])),
        "flights_compared": dg.MetadataValue.int(int(doc["compared"])),
        "dlq_backlog": dg.MetadataValue.int(int(doc["dlq_backlog"])),
        "oldest_event_dwell_s": dg.MetadataValue.float(float(doc["oldest_dwell_s"])),
    }


def watched(doc: dict[str, Any], f: Figures, hour: parallel_run.Worst) -> dict[str, Any]:
    """The observation after a cut-over as asset metadata: the last hour's worst (the same names as a
    comparison's, so the plots go on), where the watch stands, and the report."""
    return {"dlq_backlog": dg.MetadataValue.int(max(f.dead, hour.dlq)),
            "oldest_event_dwell_s": dg.MetadataValue.float(max(f.unsent_age_s, hour.dwell_s)),
            "observation": doc["state"], "observation_hours_watched": dg.MetadataValue.int(doc["hours_watched"]),
            "rollback_until": doc["rollback_until"], "observation_report": dg.MetadataValue.md(
                observation.as_markdown(doc))}


@dg.op(description="Compare this installation's flights with the reference, and record the figures; in the 48 "
                   "hours after a cut-over to this installation, report that observation.")
def compare_op(context: dg.OpExecutionContext, config: CompareConfig, msgx: MsgxResource) -> None:
    against = config.against.strip() or reference()
    known_text = config.known.strip() or (os.environ.get(ENV_KNOWN) or "").strip()
    key = config.key.strip() or (os.environ.get(ENV_KEY) or "").strip() or None
    with msgx.open_app() as app:
        f = figures(app.engine)
        with app.engine.connect() as conn:
            hour = parallel_run.worst_between(conn, f.now - summary.SAMPLED_EVERY, f.now)
            watch = observation.read(conn, f.now)
        watching = watched(watch, f, hour) if watch is not None and observation.open_at(watch, f.now) else {}
        if against is None:
            if not watching:
                raise dg.Failure(f"no reference to compare with: set {ENV_AGAINST} (a postgresql+psycopg://, "
                                 "redis:// or http(s):// URL) for this installation, or give 'against' in the run "
                                 "config")
            context.log.info(f"the 48 hours after the cut-over: {watching['observation']}")
            materialize(context, PARALLEL_RUN, watching)
            return
        outcome = run(app.settings.db_url or "", against, known=Path(known_text) if known_text else None, key=key)
        doc = summary.figures(outcome, dlq_backlog=max(f.dead, hour.dlq),
                              oldest_dwell_s=max(f.unsent_age_s, hour.dwell_s), readings=hour.readings)
        with app.engine.begin() as conn:
            parallel_run.record(conn, doc, {"against": redact_urls(against), "known": known_text or None,
                                            "key": key, "run_id": context.run_id})
    if outcome.code == EXIT_UNREADABLE:
        raise dg.Failure(f"could not compare: {outcome.error}")
    assert outcome.report is not None
    context.log.info(f"parallel run: {doc['unexplained']} unexplained, {doc['explained']} explained difference(s) "
                     f"over {doc['compared']} flight(s); dead letters {doc['dlq_backlog']}, oldest undelivered "
                     f"event {doc['oldest_dwell_s']:.1f} s")
    materialize(context, PARALLEL_RUN, {**plotted(doc), "verdict": outcome.report["verdict"],
                                        "report": dg.MetadataValue.md(outcome.output), **watching})


@dg.job(tags=singleton("compare"), executor_def=dg.in_process_executor,
        description="One comparison of the parallel run: this installation's flights against the reference "
                    f"({ENV_AGAINST}), recorded as the parallel_run asset's figures and in msgx's database.")
def compare_job() -> None:
    compare_op()
