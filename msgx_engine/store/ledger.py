"""The snapshot ledger (``schd_gen``, ``schd_gen_flid``) and the one transaction-1 write of a snapshot.

``load_snapshot`` runs under the writer lock and reads, in a constant number of statements, what
the pure handler needs: the day's ledger row and member list, the heads of every flight involved
and the open RQFD a RESP may answer. ``SnapshotWrite.apply`` then writes the whole snapshot in the
caller's transaction (FS §3.3 steps 1-6): replay short-circuit, version CAS, full states, soft
deletes, member list, request completion, run record, and returns the ``schd`` outbox rows. Any
failure rolls the whole transaction back, so the old generation stays intact (INV-31).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import date, datetime

from sqlalchemy import ARRAY, Connection, Text, any_, bindparam, delete, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import SQLAlchemyError

from msgx_engine.handlers.snapshot import (
    HEADS,
    LEDGER,
    OUTLINE,
    OUTLINE_ERROR,
    REQUEST,
    Head,
    Ledger,
    OpenRequest,
    PackageRejected,
    Plan,
    SnapshotInput,
    flids_to_read,
    outline,
    plan_snapshot,
)
from msgx_engine.sis.decode import SisMessage
from msgx_engine.state.serialize import state_json, tombstone_json
from msgx_engine.store.flights import FlightRepository
from msgx_engine.store.tables import flight_schd, req_track, schd_gen, schd_gen_flid, schd_gen_run

log = logging.getLogger(__name__)

TOPIC_SCHD = "schd"
_FLIDS = bindparam("flids", type_=ARRAY(Text))


class LedgerConflict(SQLAlchemyError):
    """The ledger or the request changed between the locked read and the write (CAS miss).

    A SQLAlchemyError on purpose: the protocol classes it INFRA, rolls back and retries (FS §3.3
    step 5), and the retry re-reads the ledger.
    """


# --- reads --------------------------------------------------------------------------------------
def read_ledger(conn: Connection, day: date) -> Ledger:
    row = conn.execute(select(schd_gen.c.version, schd_gen.c.last_message_id)
                       .where(schd_gen.c.fday == day)).first()
    members = frozenset(r[0] for r in conn.execute(
        select(schd_gen_flid.c.flid).where(schd_gen_flid.c.fday == day)))
    return Ledger(day, row.version if row else None, row.last_message_id if row else None, members)


def read_heads(conn: Connection, flids: list[str]) -> dict[str, Head]:
    """Bookkeeping columns only: a snapshot rewrites every field, so it never loads details."""
    if not flids:
        return {}
    c = flight_schd.c
    rows = conn.execute(select(c.flid, c.fday, c.state_version, c.deleted, c.ffid).where(c.flid == any_(_FLIDS)),
                        {"flids": flids})
    return {r.flid: Head(r.flid, r.fday, r.state_version, r.deleted, r.ffid) for r in rows}


def open_request(conn: Connection, rtype: str, styp: str | None = None) -> OpenRequest | None:
    """The newest SENT request of ``rtype`` (RQFD, or RQRD for reference type ``styp``); D16
    allows one open request per (TYPE, STYP). The RESP handlers judge its DTTM purely."""
    query = select(req_track.c.req_id, req_track.c.fday, req_track.c.sent_at).where(
        req_track.c.rtype == rtype, req_track.c.status == "SENT")
    if styp is not None:
        query = query.where(req_track.c.styp == styp)
    row = conn.execute(query.order_by(req_track.c.req_id.desc()).limit(1)).first()
    return OpenRequest(row.req_id, row.fday, row.sent_at) if row else None


def load_snapshot(conn: Connection, msg: SisMessage) -> dict[str, object]:
    """The handler's context for SCHD DNLD/RESP, read under the writer lock (no row locks needed:
    the pipeline lock already serialises every writer; the CAS catches any that is not)."""
    try:
        pkg = outline(msg)
    except PackageRejected as exc:
        return {OUTLINE_ERROR: exc}
    extra: dict[str, object] = {OUTLINE: pkg}
    day = pkg.day
    if msg.meta.styp == "RESP":
        request = open_request(conn, "RQFD")
        extra[REQUEST] = request
        day = request.fday if request else None
    if day is None:
        return extra
    ledger = read_ledger(conn, day)
    extra[LEDGER] = ledger
    extra[HEADS] = read_heads(conn, flids_to_read(pkg, ledger.members))
    return extra


# --- the write ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class SnapshotWrite:
    """Transaction-1 effect of an accepted snapshot (built by the handler, applied by the protocol)."""

    inp: SnapshotInput

    def apply(self, conn: Connection, msg_id: int, now: datetime) -> list[dict]:
        inp = self.inp
        if inp.ledger.last_message_id == msg_id:
            log.info("snapshot %s for %s is the day's last message: replay short-circuit", msg_id, inp.day)
            return []
        plan = plan_snapshot(inp, msg_id)
        version = advance_version(conn, inp.ledger, msg_id, now)
        FlightRepository(conn).persist_next_states(plan.written)
        tombstones = soft_delete(conn, plan.deleted, msg_id, now)
        replace_members(conn, inp.day, inp.ledger.members, plan.members)
        if inp.request is not None:
            complete_request(conn, inp.request.req_id, msg_id, now)
        record_run(conn, msg_id, inp, plan, version, now)
        if plan.kept_later:
            log.warning("snapshot %s for %s left %d flight(s) owned by a later day as they are (D3): %s",
                        msg_id, inp.day, len(plan.kept_later), ", ".join(plan.kept_later[:20]))
        return schd_events(msg_id, plan) + tombstones


def advance_version(conn: Connection, ledger: Ledger, msg_id: int, now: datetime) -> int:
    """CAS on ``schd_gen.version``: +1 from the version read under the lock, or 1 for a new day."""
    if ledger.version is None:
        stmt = (pg_insert(schd_gen).values(fday=ledger.day, version=1, last_message_id=msg_id, updated_at=now)
                .on_conflict_do_nothing(index_elements=["fday"]))
    else:
        stmt = (update(schd_gen).where(schd_gen.c.fday == ledger.day, schd_gen.c.version == ledger.version)
                .values(version=ledger.version + 1, last_message_id=msg_id, updated_at=now))
    version = conn.execute(stmt.returning(schd_gen.c.version)).scalar()
    if version is None:
        raise LedgerConflict(f"schd_gen {ledger.day} is no longer at version {ledger.version}", None, None)
    return version


def soft_delete(conn: Connection, flids: tuple[str, ...], msg_id: int, now: datetime) -> list[dict]:
    """D2: mark deleted, bump ``state_version``, keep the row and details; one tombstone each."""
    if not flids:
        return []
    rows = conn.execute(
        update(flight_schd).where(flight_schd.c.flid == any_(_FLIDS), flight_schd.c.deleted.is_(False))
        .values(deleted=True, deleted_at=now, updated_at=now, last_message_id=msg_id,
                state_version=flight_schd.c.state_version + 1)
        .returning(flight_schd.c.flid, flight_schd.c.state_version), {"flids": list(flids)}).fetchall()
    if len(rows) != len(flids):
        raise LedgerConflict(f"{len(flids) - len(rows)} diff-delete target(s) changed under the lock", None, None)
    return [{"msg_id": msg_id, "flid": r.flid, "topic": TOPIC_SCHD, "kind": "tombstone",
             "state_version": r.state_version, "payload": tombstone_json(r.flid, r.state_version)}
            for r in sorted(rows, key=lambda r: r.flid)]


def replace_members(conn: Connection, day: date, old: frozenset[str], new: frozenset[str]) -> None:
    """The day's member list becomes ``new`` (replaced as a whole; only the difference is written)."""
    gone = sorted(old - new)
    added = sorted(new - old)
    if gone:
        conn.execute(delete(schd_gen_flid).where(schd_gen_flid.c.fday == day,
                                                 schd_gen_flid.c.flid == any_(_FLIDS)), {"flids": gone})
    if added:
        conn.execute(insert(schd_gen_flid), [{"fday": day, "flid": f} for f in added])


def complete_request(conn: Connection, req_id: int, msg_id: int, now: datetime) -> None:
    """The RESP answers the open request in the same transaction (US-06 AC4, US-08 AC5)."""
    done = conn.execute(update(req_track).where(req_track.c.req_id == req_id, req_track.c.status == "SENT")
                        .values(status="DONE", answer_msg_id=msg_id, done_at=now).returning(req_track.c.req_id))
    if done.first() is None:
        raise LedgerConflict(f"request {req_id} is no longer SENT", None, None)


def record_run(conn: Connection, msg_id: int, inp: SnapshotInput, plan: Plan, version: int, now: datetime) -> None:
    conn.execute(insert(schd_gen_run).values(
        msg_id=msg_id, fday=inp.day, version=version, styp=inp.styp, flights=len(inp.flights),
        written=len(plan.written), deleted=len(plan.deleted), kept_later=len(plan.kept_later),
        kept_later_flids=json.dumps(list(plan.kept_later)) if plan.kept_later else None,
        req_id=inp.request.req_id if inp.request else None, created_at=now))


def schd_events(msg_id: int, plan: Plan) -> list[dict]:
    """One whole-state ``schd`` event per written flight (FS §4.2; no ``msg`` change events)."""
    return [{"msg_id": msg_id, "flid": s.flid, "topic": TOPIC_SCHD, "kind": "state",
             "state_version": s.state_version, "payload": state_json(s)} for s in plan.written]
