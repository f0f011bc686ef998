"""Intake's statements over the queue: registering mailbox messages and the gaps in their ids.

Registration writes one PENDING ``proc_state`` row per mailbox message (INV-2b), ``intake_gap``
holds the holes in the id sequence the head waits for, and ``intake_state`` the intake's
bookkeeping (the high-water mark, the last full scan). They run once per batch or scan, so they
are SQLAlchemy Core, apart from the position the pump reads every pass. They live apart from
``store.queue``, the pump's statements per message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert

from msgx_engine.store.status import TERMINAL, Status, TodoStatus, sql_in
from msgx_engine.store.tables import (
    IS_OPEN,
    IS_PENDING_TODO,
    backfill_todo,
    intake_gap,
    intake_state,
    proc_state,
    proc_state_archive,
)

# --- intake (registration and gaps) ----------------------------------------------------------------
INTAKE = "cminmsgs"                 # intake_state.name of the one mailbox table


def max_registered(conn: Connection) -> int:
    """The largest mailbox id ever registered, archived ones included (two index lookups), so the
    PK-bounded scan stays where it was after archiving (DESIGN §2, step 1)."""
    return int(conn.execute(select(func.greatest(
        select(func.coalesce(func.max(proc_state.c.msg_id), 0)).scalar_subquery(),
        select(func.coalesce(func.max(proc_state_archive.c.msg_id), 0)).scalar_subquery()))).scalar_one())


@dataclass(frozen=True)
class IntakePosition:
    """Where intake stands: the largest registered id, and the durable high-water mark (the largest
    mailbox id this database accounts for; None until the mailbox is adopted)."""

    max_registered: int
    high_water: int | None
    open_gaps: tuple[int, ...] = ()     # recorded gaps neither arrived nor passed (the first 1,000)

    @property
    def accounted_for(self) -> int:
        """Every mailbox id at or below this is registered, a recorded gap, or pre-adoption history."""
        return max(self.max_registered, self.high_water or 0)


_POSITION_SQL = (
    "SELECT greatest((SELECT coalesce(max(msg_id), 0) FROM proc_state), "
    "(SELECT coalesce(max(msg_id), 0) FROM proc_state_archive)), "
    f"(SELECT high_water FROM intake_state WHERE name = '{INTAKE}'), "
    "ARRAY(SELECT msg_id FROM intake_gap WHERE arrived_at IS NULL AND passed_at IS NULL ORDER BY msg_id "
    "LIMIT 1000)")


def intake_position(conn: Connection) -> IntakePosition:
    """Where intake stands, with the open gaps, in one statement (the pump reads it every pass)."""
    top, high, gaps = conn.exec_driver_sql(_POSITION_SQL).one()
    return IntakePosition(int(top), None if high is None else int(high), tuple(gaps))


def raise_high_water(conn: Connection, msg_id: int) -> None:
    """The high-water mark only ever moves up (a restore brings back an older one, which is the point)."""
    conn.execute(update(intake_state).where(intake_state.c.name == INTAKE).values(
        high_water=func.greatest(func.coalesce(intake_state.c.high_water, 0), msg_id)))


_REQUEUE_RESET_SQL = (
    "INSERT INTO backfill_todo (msg_id, status, created_at, last_error) "
    f"SELECT p.msg_id, '{TodoStatus.PENDING}', %(now)s, %(why)s FROM proc_state p "
    f"WHERE p.msg_id = ANY(%(ids)s) AND p.status IN {sql_in(TERMINAL)} "
    f"ON CONFLICT (msg_id) DO UPDATE SET status = '{TodoStatus.PENDING}', next_attempt_at = NULL, "
    "done_at = NULL, last_error = EXCLUDED.last_error "
    f"WHERE backfill_todo.status IN ('{TodoStatus.DONE}', '{TodoStatus.ALREADY}') "
    "AND backfill_todo.done_at < %(since)s RETURNING msg_id")


def requeue_reset_marks(conn: Connection, ids: list[int], *, seen_before: datetime, now: datetime) -> list[int]:
    """Terminal messages whose mailbox mark was written (or found) before ``seen_before`` but whose
    row reads unmarked now: someone reset DATE_PROCESSED to NULL. Their backfill todo goes back to
    PENDING (a missing one is recreated), so the mark is written again; the message itself stays
    as it ended. Returns the ids requeued now (each only once: a PENDING todo is left alone)."""
    if not ids:
        return []
    rows = conn.exec_driver_sql(_REQUEUE_RESET_SQL, {
        "ids": ids, "now": now, "since": seen_before,
        "why": "the mailbox mark was reset to NULL after processing; marking again"})
    return sorted(r[0] for r in rows)


def low_water(conn: Connection, max_registered: int) -> int:
    """Smallest id not yet terminal and marked, minus one; everything below it is finished."""
    open_min = conn.execute(select(func.min(proc_state.c.msg_id)).where(IS_OPEN)).scalar()
    todo_min = conn.execute(select(func.min(backfill_todo.c.msg_id))
                            .where(IS_PENDING_TODO)).scalar()
    lows = [v for v in (open_min, todo_min) if v is not None]
    return (min(lows) - 1) if lows else max_registered


# an archived message is never registered twice (US-11 AC3): one statement for both tables
_REGISTERED_SQL = ("SELECT msg_id FROM proc_state WHERE msg_id = ANY(%(ids)s) "
                   "UNION ALL SELECT msg_id FROM proc_state_archive WHERE msg_id = ANY(%(ids)s)")


def registered_among(conn: Connection, ids: list[int]) -> set[int]:
    """Which of ``ids`` this database registered, in ``proc_state`` or archived."""
    if not ids:
        return set()
    return {r[0] for r in conn.exec_driver_sql(_REGISTERED_SQL, {"ids": ids})}


def unarrived_gaps(conn: Connection, limit: int | None = 10_000) -> list[int]:
    """Recorded gaps whose row never turned up, open or passed (the newest ``limit``; None: all)."""
    q = select(intake_gap.c.msg_id).where(intake_gap.c.arrived_at.is_(None)).order_by(intake_gap.c.msg_id.desc())
    return sorted(r[0] for r in conn.execute(q if limit is None else q.limit(limit)))


@dataclass(frozen=True)
class Registration:
    registered: int
    late: frozenset[int]
    gaps_recorded: int


def register(conn: Connection, new_ids: list[int], max_registered: int, now: datetime,
             holes: list[int], *, accounted_for: int | None = None) -> Registration:
    """Register ``new_ids`` PENDING once each (INV-2b); ids below the previous top, or filling a
    gap the head already passed, are late arrivals; ``holes`` become open gaps. ``accounted_for``
    (``IntakePosition.accounted_for``): every recorded gap lies below it, since a gap is recorded
    with a larger id and the high-water mark is raised past that id in the same transaction, so
    ids above it fill none and the gap lookup is skipped (the pump's every pass)."""
    fills_none = accounted_for is not None and min(new_ids) > accounted_for
    gaps = [] if fills_none else conn.execute(
        select(intake_gap.c.msg_id, intake_gap.c.passed_at)
        .where(intake_gap.c.msg_id.in_(new_ids), intake_gap.c.arrived_at.is_(None))).fetchall()
    gap_ids = {g.msg_id for g in gaps}
    passed = {g.msg_id for g in gaps if g.passed_at is not None}
    late = {i for i in new_ids if i < max_registered and i not in gap_ids} | passed
    rows = [{"msg_id": i, "status": Status.PENDING, "created_at": now, "updated_at": now,
             "late_arrival": i in late} for i in new_ids]
    conn.execute(pg_insert(proc_state).on_conflict_do_nothing(index_elements=["msg_id"]), rows)
    if gaps:
        conn.execute(update(intake_gap).where(intake_gap.c.msg_id.in_(list(gap_ids))).values(arrived_at=now))
    if holes:
        conn.execute(pg_insert(intake_gap).on_conflict_do_nothing(index_elements=["msg_id"]),
                     [{"msg_id": h, "first_seen_at": now} for h in holes])
    raise_high_water(conn, max(new_ids))
    return Registration(len(new_ids), frozenset(late), len(holes))


def register_recovered(conn: Connection, ids: list[int], now: datetime,
                       arrived_at: Mapping[int, datetime] | None = None) -> list[int]:
    """``msgx recover``: register rows that are marked processed in the mailbox but unknown here
    (PENDING, late when below the largest registered id), their gaps arrived, the high-water mark
    raised past them. ``arrived_at``: when they arrived where they were processed first (a
    rollback and a recovery know it), kept so that an answer among them is judged by it (L16, verdicts from the
    mailbox). Returns the ids registered now (one already registered is left alone)."""
    top = max_registered(conn)
    when = arrived_at or {}
    registered: list[int] = []
    for n in range(0, len(ids), 2000):
        chunk = ids[n:n + 2000]
        rows = [{"msg_id": i, "status": Status.PENDING, "created_at": now, "updated_at": now,
                 "late_arrival": i < top, "arrived_at": when.get(i)} for i in chunk]
        done = conn.execute(pg_insert(proc_state).values(rows).on_conflict_do_nothing(index_elements=["msg_id"])
                            .returning(proc_state.c.msg_id))
        registered += [r[0] for r in done]
        conn.execute(update(intake_gap).where(intake_gap.c.msg_id.in_(chunk), intake_gap.c.arrived_at.is_(None))
                     .values(arrived_at=now))
    raise_high_water(conn, max(ids))
    return sorted(registered)


def arrivals(conn: Connection, ids: Sequence[int]) -> dict[int, datetime]:
    """msg_id -> when it arrived here (its registration, or the ``arrived_at`` it was brought
    over with), for ``ids``: what an answer among them is judged by (L2, late answers; L16)."""
    found: dict[int, datetime] = {}
    for n in range(0, len(ids), 2000):
        found.update(conn.execute(select(proc_state.c.msg_id, ARRIVED)
                                  .where(proc_state.c.msg_id.in_(list(ids[n:n + 2000])))).tuples().all())
    return found


ARRIVED = func.coalesce(proc_state.c.arrived_at, proc_state.c.created_at)


def record_full_scan(conn: Connection, now: datetime) -> None:
    conn.execute(update(intake_state).where(intake_state.c.name == "cminmsgs").values(last_full_scan_at=now))


def open_ids_after(conn: Connection, msg_id: int, limit: int) -> list[int]:
    """Open message ids after ``msg_id`` in id order (the body prefetch)."""
    return [r[0] for r in conn.execute(
        select(proc_state.c.msg_id).where(IS_OPEN, proc_state.c.msg_id > msg_id)
        .order_by(proc_state.c.msg_id).limit(limit))]

