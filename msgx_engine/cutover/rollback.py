"""``msgx cutover rollback --from URL``: back to the installation that stopped writes, after the one
promoted in its place stopped writes too (OPS-4, PRE-1).

Run on the previous installation with its own (production) configuration; ``--from`` is the promoted
installation's state database, only read. Refused (nothing changed) unless this installation is
stopped, the other records that it took over at exactly this installation's watermark W and has
stopped writes since (at W2), no pump of this installation runs, and nobody holds the mailbox lock.

The rows the promoted installation finished between the two watermarks are brought over so that
none is lost, applied twice or published twice:

1. they are registered here (with any recorded gap of this installation that the other finished),
   audited, under the pump's lock (their mailbox marks stay as the other wrote them: C-15);
   The same transaction records "rolling back" (writes still stopped) before anything is replayed;
2. this installation's own pump applies them in id order to its own state, while the record says
   rolling back (so no other pump of it runs, and no dispatcher of it publishes anything) and while
   the command holds the dispatcher's lock. Their events are recorded sent without sending, after
   every commit of the replay, and once more in the transaction that reopens writes: the other
   installation published them. The marks the replay owes end ALREADY (the other marked them). The
   pump goes on with newer rows as usual; those are published once writes are open again;
3. when every one of them has finished here and the two installations' flights agree (except the
   flights rows after W2 changed), one transaction records their events sent and the record says
   writes open, took over at W2, after this installation's versions and event ids moved above
   what the promoted one published (decision O19, version floor: stored versions raised without an event, floors
   for flights only it stores, and the events of rows after W2 the replay's pump processed moved
   above); the Redis projection is rebuilt from this database. Otherwise the
   record stays "rolling back" and the command says what is left (exit 1): run it again once that
   is fixed; it goes on where it stopped.

A command that dies between a commit of the replay and the suppression of that commit's events
leaves them unsent, but no dispatcher publishes them while the record says rolling back; the same
command run again suppresses them and only then reopens writes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import Connection

from msgx_engine import faults
from msgx_engine.app import App
from msgx_engine.cutover import rules
from msgx_engine.cutover.common import (
    Report,
    Unfinished,
    compare_installations,
    lock,
    mailbox_lock,
    published_elsewhere,
    read_other,
    rebuild_projection,
    refuse_if,
)
from msgx_engine.operations.recover import id_ranges
from msgx_engine.pipeline.intake import StateBehindMailbox
from msgx_engine.pipeline.pump import PumpBusy, PumpOptions
from msgx_engine.store import audit, cutover_state, locks, registration, version_floor
from msgx_engine.store.cutover_state import CutoverState

log = logging.getLogger(__name__)

HOLDER = "msgx cutover rollback"
PUBLISHED_BY_OTHER = "not sent: published by the installation promoted in this one's place"


@dataclass(frozen=True)
class RolledBack:
    watermark: int
    other_watermark: int
    brought_over: int
    suppressed: int
    flights_rebuilt: int | None
    audit_id: int


def rollback(app: App, from_url: str, *, operator: str, reason: str, known: Path | None = None,
             replay_runtime_s: float = 1800.0, report: Report | None = None) -> RolledBack:
    report = report if report is not None else Report()
    engine = app.engine
    with engine.connect() as conn:
        own = cutover_state.read(conn)
        gaps = cutover_state.open_gaps(conn)
    first = read_other(from_url)
    refuse_if(rules.rollback_refusal(shadow_mode=app.settings.shadow, own=own, other=first.state))
    assert own is not None and own.watermark is not None and first.state is not None
    low, high = own.watermark, first.state.watermark
    assert high is not None
    other = read_other(from_url, finished_after=low, finished_upto=high, among=gaps)
    report.say(f"this installation stopped writes at mailbox id {low}; the promoted one ({other.label}) took over "
               f"there and stopped writes at id {high}")
    published = published_elsewhere(from_url)
    report.say(f"the promoted installation published {published.describe()}")
    dispatcher = lock(engine, locks.DISPATCHER, HOLDER, "a dispatcher is running on this state database: stop it "
                      "(`msgx dispatch`, the dispatch schedule) before rolling back")
    try:
        audit_id = _bring_over(app, own, low, high, other.finished, operator=operator, reason=reason, report=report,
                               registered_at=other.registered)
        _replay(app, other.finished, replay_runtime_s, report)
        left = _left(app, other.finished)
        if left:
            raise Unfinished(f"{len(left)} row(s) the promoted installation processed have not finished here "
                             f"({id_ranges(left)}): see `msgx status`, fix the cause, then run the rollback again")
        agreement = compare_installations(app.settings.db_url or "", from_url, watermark=high, known=known)
        if agreement.unexplained:
            raise Unfinished(f"after the replay this installation's flights differ from the promoted one's: "
                             f"{agreement.describe()}; writes stay stopped: compare them with `msgx compare "
                             "--against URL`, fix the cause, then run the rollback again")
        report.say(f"flights match the promoted installation's: {agreement.describe()}")
        with engine.begin() as conn:
            locks.lock_writer_row(conn)
            cutover_state.suppress(conn, app.clock.now(), PUBLISHED_BY_OTHER, ids=other.finished)
            suppressed = cutover_state.suppressed(conn, PUBLISHED_BY_OTHER, other.finished)
            lifted = version_floor.lift(conn, published, republish_after=high)
            cutover_state.write(conn, CutoverState(cutover_state.PRODUCTION, took_over_at=high, audit_id=audit_id))
            audit.set_outcome(conn, audit_id, {"brought_over": len(other.finished), "suppressed": suppressed,
                                               "took_over_at": high, "versions": lifted.outcome()})
    finally:
        dispatcher.release()
    flights = rebuild_projection(app, report)
    report.audit_id = audit_id
    report.say(f"{len(other.finished)} row(s) brought over, {suppressed} of their event(s) recorded as published by "
               f"the promoted installation; writes open again from mailbox id {high}")
    report.say(lifted.describe())
    log.warning("cutover rollback (audit %s): back from mailbox id %s", audit_id, high)
    return RolledBack(low, high, len(other.finished), suppressed, flights, audit_id)


def _bring_over(app: App, own: CutoverState, low: int, high: int, ids: Sequence[int], *, operator: str,
                reason: str, report: Report, registered_at: Mapping[int, datetime] | None = None) -> int:
    """Step 1 (module doc), audited, under the pump's lock and with the mailbox lock free."""
    pump = lock(app.engine, locks.PUMP, HOLDER, "a pump of this installation is running although writes are stopped "
                "here: stop it (and the Dagster sensor that starts it) before rolling back")
    try:
        mailbox = mailbox_lock(app.mailbox.url)
        mailbox.dispose()          # free: the replay's pump takes it
        report.say("the mailbox lock is free: no installation processes the mailbox")
        assert pump.conn is not None
        conn = pump.conn
        with conn.begin():
            locks.lock_writer_row(conn)
            registered = registration.register_recovered(conn, list(ids), app.clock.now(), registered_at) if ids else []
            audit_id = own.audit_id if own.audit_id is not None and _resumed(conn, own) else audit.record(
                conn, operator, "cutover_rollback", reason,
                {"watermark": low, "other_watermark": high, "rows": id_ranges(ids, limit=1000)})
            cutover_state.write(conn, CutoverState(own.role, cutover_state.ROLLING_BACK, own.watermark,
                                                   own.took_over_at, audit_id))
    finally:
        pump.release()
    report.say(f"{len(ids)} row(s) the promoted installation finished after id {low} are to be applied here, "
               f"{len(registered)} of them registered now")
    return audit_id


def _resumed(conn: Connection, own: CutoverState) -> bool:
    """A rollback run again after an unfinished one: its audit row is the record's."""
    return any(e.audit_id == own.audit_id for e in audit.entries(conn, action="cutover_rollback", limit=5))


def _replay(app: App, ids: Sequence[int], runtime_s: float, report: Report) -> None:
    """Step 2: this installation's pump, with the events of ``ids`` suppressed after every commit."""
    def committed() -> None:
        faults.reach("rollback_before_suppress")     # the crash this module doc's last paragraph covers
        _suppress(app, ids)

    pump = app.pump(PumpOptions(exit_when_waiting=True, max_runtime_s=runtime_s), on_release=committed)
    pump.writes.replay = True
    try:
        summary = pump.run()
    except (PumpBusy, StateBehindMailbox) as exc:
        raise Unfinished(f"the replay stopped: {exc}; writes stay stopped: fix the cause, then run the rollback "
                         "again") from exc
    report.say(f"replayed: {sum(summary.processed.values())} message(s) processed here, {summary.marked} mark(s) "
               "written (a row the promoted installation marked keeps its mark)")


def _suppress(app: App, ids: Sequence[int]) -> int:
    with app.engine.begin() as conn:
        return cutover_state.suppress(conn, app.clock.now(), PUBLISHED_BY_OTHER, ids=ids)


def _left(app: App, ids: Sequence[int]) -> list[int]:
    with app.engine.connect() as conn:
        return cutover_state.not_finished(conn, ids)
