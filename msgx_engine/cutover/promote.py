"""``msgx cutover promote --from URL``: a shadow takes the right over from the stopped installation
and goes on from its watermark as production (OPS-4, PRE-1, OPS-3).

Run with the configuration the installation has afterwards: production mode, the production topics
and Redis key, the same state database it used as a shadow. ``--from`` is the stopped installation's
state database, only read.

Refused (nothing changed) outside production mode, on a state database that is not a shadow's, when
the old installation records no stop, while a pump or a dispatcher of this installation runs, when
anybody holds the mailbox lock, when this installation has not finished the mailbox up to the
watermark, or when its flights differ from the old installation's without explanation (the flights
that rows after the watermark changed are left out: the shadow kept reading while production was
stopped, so it is ahead of it there by design).

What the shadow did after the watermark becomes production's, once:

- its rows there are owed their mailbox marks (their SHADOW todos become due and are written now,
  only where NULL; the old installation marked nothing after its watermark);
- their events went to the shadow's topics or nowhere: they are due again, and the production
  dispatcher publishes them to the production topics once;
- events of rows at or below the watermark that the shadow had not delivered yet are recorded sent
  without sending: the old installation published those;
- the Redis projection is rebuilt on this configuration's (production) key from this database;
- its versions and event ids continue above what the old installation published (read from its
  state database; ``store/version_floor.py``, decision O19, version floor): a shadow started from a later day
  counts from a later point, and a consumer that keeps the highest per flight would drop its
  changes. Stored versions are raised without an event, flights only the old one stores get a
  floor, and the events of the rows after the watermark are moved above before they are published.

The record then says production, writes open, took over at the watermark: a shadow pump on this
database refuses from now on, as does a shadow start (its processed marks show it too).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from msgx_engine.app import App
from msgx_engine.cutover import rules
from msgx_engine.cutover.common import (
    OtherSide,
    Refused,
    Report,
    compare_installations,
    lock,
    mailbox_free,
    published_elsewhere,
    read_other,
    rebuild_projection,
    refuse_if,
)
from msgx_engine.operations.shadow_start import production_evidence
from msgx_engine.pipeline.backfill import Backfill
from msgx_engine.store import audit, cutover_state, locks, version_floor
from msgx_engine.store.cutover_state import CutoverState
from msgx_engine.store.session_lock import SessionLock

log = logging.getLogger(__name__)

HOLDER = "msgx cutover promote"
PUBLISHED_BEFORE = "not sent: published by the installation this one took over from"


@dataclass(frozen=True)
class Promoted:
    watermark: int
    finished: int
    marks_owed: int
    events_again: int
    events_suppressed: int
    marked: int
    flights_rebuilt: int | None
    audit_id: int


def promote(app: App, from_url: str, *, operator: str, reason: str, known: Path | None = None,
            report: Report | None = None) -> Promoted:
    report = report if report is not None else Report()
    with app.engine.connect() as conn:
        own = cutover_state.read(conn)
        history = production_evidence(conn)
    old = read_other(from_url)
    refuse_if(rules.promote_refusal(shadow_mode=app.settings.shadow, own=own, own_history=history, old=old.state))
    assert old.state is not None and old.state.watermark is not None
    report.say(f"the old installation ({old.label}) stopped writes at mailbox id {old.state.watermark} "
               f"(audit {old.state.audit_id})")
    pump = lock(app.engine, locks.PUMP, HOLDER, "a pump is running on this state database: stop the shadow's pump "
                "(and the Dagster sensor that starts it) before promoting it")
    try:
        dispatcher = lock(app.engine, locks.DISPATCHER, HOLDER, "a dispatcher is running on this state database: "
                          "stop the shadow's dispatcher (`msgx dispatch`, the dispatch schedule) before promoting it")
        try:
            with mailbox_free(app.mailbox.url, report):
                return _take_over(app, pump, old, from_url, operator=operator, reason=reason, known=known,
                                  report=report)
        finally:
            dispatcher.release()
    finally:
        pump.release()


def _take_over(app: App, pump: SessionLock, old: OtherSide, from_url: str, *, operator: str, reason: str,
               known: Path | None, report: Report) -> Promoted:
    assert pump.conn is not None and old.state is not None and old.state.watermark is not None
    conn, watermark = pump.conn, old.state.watermark
    pos = cutover_state.position(conn)
    conn.commit()
    finished = rules.finished_high_water(pos.lowest_open, pos.accounted_for)
    refuse_if(rules.behind_refusal(finished, watermark))
    report.say(f"this installation has finished the mailbox up to id {finished} (the watermark is {watermark})")
    agreement = compare_installations(app.settings.db_url or "", from_url, watermark=watermark, known=known)
    if agreement.unexplained:
        raise Refused(f"this installation's flights differ from the old installation's: {agreement.describe()}. "
                      f"See the whole report with `msgx compare --against URL` (URL: the old installation's state "
                      "database); explain or fix every difference, then promote again")
    report.say(f"flights match the old installation's: {agreement.describe()}")
    published = published_elsewhere(from_url)
    report.say(f"the old installation published {published.describe()}")
    now = app.clock.now()
    with conn.begin():
        locks.lock_writer_row(conn)
        owed = cutover_state.owe_marks_after(conn, watermark)
        again = cutover_state.deliver_again_after(conn, watermark)
        suppressed = cutover_state.suppress(conn, now, PUBLISHED_BEFORE, upto=watermark)
        lifted = version_floor.lift(conn, published, republish_after=watermark)
        audit_id = audit.record(conn, operator, "cutover_promote", reason,
                                {"from": old.label, "watermark": watermark, "old_audit": old.state.audit_id},
                                {"finished_up_to": finished, "marks_owed": owed, "events_again": again,
                                 "events_suppressed": suppressed, "versions": lifted.outcome()})
        cutover_state.write(conn, CutoverState(cutover_state.PRODUCTION, took_over_at=watermark, audit_id=audit_id))
    report.audit_id = audit_id
    report.say(f"took the right over at mailbox id {watermark}: {owed} row(s) processed after it are owed their "
               f"marks, {again} of their event(s) will be published to the production topics, {suppressed} "
               "undelivered event(s) at or below it recorded as published by the old installation")
    report.say(lifted.describe())
    marked = Backfill(app.mailbox, app.clock).drain(conn, max_seconds=60.0).marked
    report.say(f"wrote {marked} mailbox mark(s) (only where none was written)")
    flights = rebuild_projection(app, report)
    report.say("this installation is production now: start its pump (and the Dagster sensor) and its dispatcher")
    log.warning("cutover promote (audit %s): took over at mailbox id %s", audit_id, watermark)
    return Promoted(watermark, finished, owed, again, suppressed, marked, flights, audit_id)

