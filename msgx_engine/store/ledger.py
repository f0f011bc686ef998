"""The snapshot ledger (``schd_gen``, ``schd_gen_flid``, ``schd_gen_run``) and the one
transaction-1 write of a snapshot.

``read_ledger`` and ``read_heads`` run under the writer lock and read, in a constant number of
statements, what the pure handler needs (the route assembles them into a ``SnapshotContext``).
``write_snapshot`` then writes the handler's ``SnapshotPlan`` in the caller's transaction (FS §3.3
steps 4-6): version CAS, full states, soft deletes, member list, run record with the
reconciliation report (how the package differs from the state it replaced, ``store.reconcile``),
and returns the ``schd`` outbox rows. Any failure rolls the whole transaction back, so the old
generation stays intact (INV-31).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import date, datetime
from types import MappingProxyType
from typing import Any

from sqlalchemy import ARRAY, Connection, Text, any_, bindparam, delete, func, insert, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import SQLAlchemyError

from msgx_engine.handlers.adft import DayMembers
from msgx_engine.handlers.reconcile import Reconciliation, examples, reconcile
from msgx_engine.handlers.snapshot import Head, Ledger, SnapshotPlan
from msgx_engine.state.bridges import with_bridges
from msgx_engine.store import outbox
from msgx_engine.store import reconcile as reconciliation
from msgx_engine.store.bridges import BridgeReader
from msgx_engine.store.bulk import TextArray
from msgx_engine.store.flights import FlightRepository
from msgx_engine.store.outbox import OutboxRow
from msgx_engine.store.tables import flight_schd, schd_gen, schd_gen_flid, schd_gen_run

log = logging.getLogger(__name__)
_FLIDS = bindparam("flids", type_=ARRAY(Text))
# plain SQL with a ``TextArray``: a snapshot's 10,000 FLIDs in one literal built in C (P31, binary COPY and FLID arrays)
_HEADS_SQL = ("SELECT flid, fday, state_version, deleted, ffid, maid, alcd, flno, sodt, field_msg FROM flight_schd "
              "WHERE flid = ANY(%(flids)s)")
_ADD_MEMBERS_SQL = "INSERT INTO schd_gen_flid (fday, flid) SELECT %(fday)s, unnest(%(flids)s::text[])"


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
    """Bookkeeping and code-share columns only: a snapshot rewrites every field, so it never loads
    details."""
    if not flids:
        return {}
    rows = conn.exec_driver_sql(_HEADS_SQL, {"flids": TextArray(flids)})
    return {flid: Head(flid, fday, version, deleted, ffid, maid, alcd, flno, sodt, MappingProxyType(stamps or {}))
            for flid, fday, version, deleted, ffid, maid, alcd, flno, sodt, stamps in rows}


# --- the write ----------------------------------------------------------------------------------
def write_snapshot(conn: Connection, plan: SnapshotPlan, msg_id: int, now: datetime) -> Sequence[OutboxRow]:
    """Transaction-1 write of an accepted snapshot; returns its ``schd`` outbox rows, built as the
    caller writes them (``outbox.StateEvents``)."""
    version = advance_version(conn, plan.ledger, msg_id, now)
    written = with_bridges(plan.written, BridgeReader(conn, msg_id))
    # version 1 everywhere: no flight it writes was live before (it had no row, or only the
    # tombstone of an FDEL), so there is nothing to compare (a new day's package skips the copies
    # and the comparison)
    fresh = all(s.state_version == 1 for s in written)
    compared = [] if fresh else reconciliation.keep_before(conn, [s.flid for s in written])
    FlightRepository(conn).persist_next_states(written, unstored=plan.unstored)
    tombstones = soft_delete(conn, plan.deleted, msg_id, now)
    replace_members(conn, plan.day, plan.ledger.members, plan.members)
    pairs = [] if fresh else reconciliation.differences(conn)
    unchanged = reconciliation.keep_unchanged(conn, compared, pairs) if compared else set()
    before = reconciliation.before_states(conn, {f for flids in examples(pairs).values() for f in flids})
    report = reconcile(plan.day, plan.styp, plan.flights, plan.written, compared, pairs, before, plan.deleted,
                       len(plan.kept_later))
    record_run(conn, msg_id, plan, version, now, report)
    if plan.kept_later:
        log.warning("snapshot %s for %s left %d flight(s) owned by a later day as they are (D3): %s",
                    msg_id, plan.day, len(plan.kept_later), ", ".join(plan.kept_later[:20]))
    # a flight a newer message deleted stays deleted (F6, last writer wins): written, hidden, announced to nobody;
    # one the snapshot left as it was keeps its version and is announced to nobody (US-06 AC5)
    return outbox.StateEvents(msg_id, [s for s in written if not s.deleted and s.flid not in unchanged], tombstones)


def advance_version(conn: Connection, ledger: Ledger, msg_id: int, now: datetime) -> int:
    """CAS on ``schd_gen.version``: +1 from the version read under the lock, or 1 for a new day."""
    if ledger.version is None:
        version = conn.execute(
            pg_insert(schd_gen).values(fday=ledger.day, version=1, last_message_id=msg_id, updated_at=now)
            .on_conflict_do_nothing(index_elements=["fday"]).returning(schd_gen.c.version)).scalar()
    else:
        version = conn.execute(
            update(schd_gen).where(schd_gen.c.fday == ledger.day, schd_gen.c.version == ledger.version)
            .values(version=ledger.version + 1, last_message_id=msg_id, updated_at=now)
            .returning(schd_gen.c.version)).scalar()
    if version is None:
        raise LedgerConflict(f"schd_gen {ledger.day} is no longer at version {ledger.version}", None, None)
    return version


def soft_delete(conn: Connection, flids: tuple[str, ...], msg_id: int, now: datetime) -> list[OutboxRow]:
    """D2, soft delete: mark deleted, bump ``state_version``, keep the row and details; one tombstone each."""
    if not flids:
        return []
    rows = conn.execute(
        update(flight_schd).where(flight_schd.c.flid == any_(_FLIDS), flight_schd.c.deleted.is_(False))
        .values(deleted=True, deleted_at=now, updated_at=now, last_message_id=msg_id,
                state_version=flight_schd.c.state_version + 1,
                field_msg=text("coalesce(field_msg, '{}'::jsonb) || jsonb_build_object('DELETED', "
                               "CAST(:deleted_by AS bigint))").bindparams(deleted_by=msg_id))
        .returning(flight_schd.c.flid, flight_schd.c.state_version), {"flids": list(flids)}).fetchall()
    if len(rows) != len(flids):
        raise LedgerConflict(f"{len(flids) - len(rows)} diff-delete target(s) changed under the lock", None, None)
    return [outbox.tombstone_event(msg_id, r.flid, r.state_version) for r in sorted(rows, key=lambda r: r.flid)]


def replace_members(conn: Connection, day: date, old: frozenset[str], new: frozenset[str]) -> None:
    """The day's member list becomes ``new`` (replaced as a whole; only the difference is written)."""
    gone = sorted(old - new)
    added = sorted(new - old)
    if gone:
        conn.execute(delete(schd_gen_flid).where(schd_gen_flid.c.fday == day,
                                                 schd_gen_flid.c.flid == any_(_FLIDS)), {"flids": gone})
    if added:     # one statement with one array, not an executemany of 10,000 rows
        conn.exec_driver_sql(_ADD_MEMBERS_SQL, {"fday": day, "flids": TextArray(added)})


def rejoin_members(conn: Connection, plan: DayMembers, msg_id: int, now: datetime) -> Sequence[OutboxRow]:
    """Put the flights an ADFT restored back in their days' member lists (decision L8, ADFT restore and member list); a
    flight already listed stays as it is. Writes no events: the restore's own events tell readers."""
    if plan.members:
        conn.execute(pg_insert(schd_gen_flid).values([{"fday": d, "flid": f} for d, f in plan.members])
                     .on_conflict_do_nothing(index_elements=["fday", "flid"]))
    return []


def record_run(conn: Connection, msg_id: int, plan: SnapshotPlan, version: int, now: datetime,
               report: Reconciliation) -> None:
    conn.execute(insert(schd_gen_run).values(
        msg_id=msg_id, fday=plan.day, version=version, styp=plan.styp, flights=plan.flights,
        written=len(plan.written), deleted=len(plan.deleted), kept_later=len(plan.kept_later),
        kept_later_flids=json.dumps(list(plan.kept_later)) if plan.kept_later else None,
        req_id=plan.req_id, created_at=now,
        report=json.dumps(report.as_json(), ensure_ascii=False, sort_keys=True)))


def read_reports(conn: Connection, *, day: date | None = None, after_msg_id: int | None = None,
                 latest: bool = False) -> list[dict[str, Any]]:
    """Snapshot reconciliation reports (``msg_id`` added), oldest first: of one day, after a
    mailbox id (the pump's new ones), or only the newest one."""
    c = schd_gen_run.c
    q = select(c.msg_id, c.report).where(c.report.is_not(None))
    if day is not None:
        q = q.where(c.fday == day)
    if after_msg_id is not None:
        q = q.where(c.msg_id > after_msg_id)
    rows = conn.execute(q.order_by(c.msg_id.desc()).limit(1) if latest else q.order_by(c.msg_id)).all()
    return [{"msg_id": r.msg_id, **json.loads(r.report)} for r in rows]


def last_report_id(conn: Connection) -> int:
    """The mailbox id of the newest snapshot with a report (0 when none)."""
    c = schd_gen_run.c
    return int(conn.execute(select(func.coalesce(func.max(c.msg_id), 0)).where(c.report.is_not(None))).scalar_one())
