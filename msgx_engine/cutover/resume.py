"""``msgx cutover resume``: the cut-over is called off after ``stop-writes`` and before any promote,
and the stopped installation takes its writes back (OPS-4, PRE-1).

Refused (nothing changed, exit 2) unless this installation is stopped at a watermark (and no rollback
to it is in progress), no pump of it runs, nobody holds the mailbox lock, and no mailbox row after
its watermark has been marked: marks there mean another installation was promoted and processed
rows (then ``rollback`` is the way back, because those rows' effects live in the other
installation's state). Audited; the record then says writes open and the installation goes on from
its watermark as if it had never stopped: the rows after it are still unmarked and unprocessed here.

A stop-writes killed before it recorded its watermark leaves the installation stopped with no
watermark: nobody can have taken over from it (promote needs the watermark), so resume reopens it
without the mailbox check.

What the mailbox cannot show is a promote whose installation has marked nothing yet (no rows after
the watermark arrived, or its pump never ran): the runbook says to resume only when no promote ran.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from msgx_engine.app import App
from msgx_engine.cutover import rules
from msgx_engine.cutover.common import Refused, Report, lock, mailbox_free, refuse_if
from msgx_engine.store import audit, cutover_state, locks
from msgx_engine.store.cutover_state import CutoverState

log = logging.getLogger(__name__)

HOLDER = "msgx cutover resume"


@dataclass(frozen=True)
class Resumed:
    watermark: int | None       # None: the stop-writes it undoes never finished
    audit_id: int


def resume(app: App, *, operator: str, reason: str, report: Report | None = None) -> Resumed:
    report = report if report is not None else Report()
    with app.engine.connect() as conn:
        own = cutover_state.read(conn)
    refuse_if(rules.resume_refusal(shadow_mode=app.settings.shadow, own=own))
    assert own is not None
    watermark = own.watermark
    report.say(f"this installation stopped writes at mailbox id {watermark} (audit {own.audit_id})" if watermark
               is not None else "a stop-writes of this installation did not finish (no watermark recorded)")
    pump = lock(app.engine, locks.PUMP, HOLDER, "a pump of this installation is running although writes are stopped "
                "here: stop it (and the Dagster sensor that starts it), then resume")
    try:
        with mailbox_free(app.mailbox.url, report):
            if watermark is not None:
                marked = app.mailbox.marked_above(watermark)
                refuse_if(rules.taken_over_refusal(watermark, marked.count, marked.first, marked.last))
                report.say(f"no mailbox row after id {watermark} is marked: no other installation has processed any")
            assert pump.conn is not None
            with pump.conn.begin():
                locks.lock_writer_row(pump.conn)
                if cutover_state.read(pump.conn) != own:
                    raise Refused("the cut-over record changed while resume ran (another cut-over command?): "
                                  "run resume again")
                audit_id = audit.record(pump.conn, operator, "cutover_resume", reason,
                                        {"watermark": watermark, "stop_audit": own.audit_id},
                                        {"writes": cutover_state.OPEN_WRITES})
                cutover_state.write(pump.conn, CutoverState(own.role, took_over_at=own.took_over_at,
                                                            audit_id=audit_id))
    finally:
        pump.release()
    report.audit_id = audit_id
    report.say("writes open again" + (f" from mailbox id {watermark}" if watermark is not None else "") +
               ": start this installation's pump (and the Dagster sensor) and its dispatch schedule")
    log.warning("cutover resume (audit %s): writes open again (stopped at mailbox id %s)", audit_id, watermark)
    return Resumed(watermark, audit_id)
