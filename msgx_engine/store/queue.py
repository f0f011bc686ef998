"""The message queue: ``proc_state`` and its companions, in one place.

``proc_state`` holds one row per registered mailbox message (its ``Status``, attempts, identity
binding, ``applied_at``), ``proc_state_hst`` its history, ``backfill_todo`` the mailbox marks still
to write, ``intake_gap`` the holes in the id sequence the head waits for, and ``intake_state`` the
intake's bookkeeping. Every statement over them is here, built once; nothing else names a status.

The per-message statements of the pump are plain SQL built once and sent with
``exec_driver_sql`` (no statement construction or compilation per message, DESIGN §6), and the
guarded status write is one statement that also writes the history, the backfill todo and the
event release (INV-8). The rest is SQLAlchemy Core: it runs once per batch or scan.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache

import orjson
from sqlalchemy import Connection, Row, Select, func, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert

from msgx_engine.store import identity, metric_totals
from msgx_engine.store.status import OPEN, REPLAYABLE_DEAD, TERMINAL, Status, TodoStatus, sql_in
from msgx_engine.store.tables import (
    ATTENTION_WHERE,
    IS_OPEN,
    IS_PENDING_TODO,
    backfill_todo,
    intake_gap,
    intake_state,
    proc_state,
    proc_state_archive,
)

log = logging.getLogger(__name__)

__all__ = ["OPEN", "REPLAYABLE_DEAD", "TERMINAL", "Status", "TodoStatus", "QueueHead", "Bind"]

_OPEN_SQL = sql_in(OPEN)


# --- the queue head (one statement per message) -----------------------------------------------
@dataclass(frozen=True)
class QueueHead:
    """The smallest open message (INV-3) as the head query reads it."""

    msg_id: int
    attempts: int
    deadline_from: datetime        # registration, or an operator's re-queue (the head deadline counts from it)
    next_attempt_at: datetime | None
    applied_at: datetime | None
    updated_at: datetime | None    # the last status write (a wait's previous round, D22, projection failure)
    error_class: str | None        # why the last attempt failed or the head waits (D22, D24)
    registered_at: datetime        # registration (created_at): the identity window counts from it (D26)
    replayed: bool                 # re-queued by an operator (msgx replay): its writes land on top (F6, last writer
                                   # wins)
    gap_seen: datetime | None      # the youngest open gap below it (US-01 AC5)
    writer_held: bool | None       # this session holds the writer lock (the writer row is now locked)


_HEAD_COLUMNS = ("msg_id", "attempts", "coalesce(p.requeued_at, p.created_at)", "next_attempt_at", "applied_at",
                 "updated_at", "error_class", "created_at", "(p.requeued_at IS NOT NULL)")
# The head query also takes the writer row lock of transaction 1 (DESIGN §2 step 7): the
# transaction that applies the head starts here, so the lock costs no extra round trip.
_HEAD_SQL = (
    "WITH w AS (SELECT pg_backend_pid() = %(pid)s AS held FROM pipeline_lock WHERE name = %(name)s "
    "FOR UPDATE) "
    f"SELECT {', '.join(c if '(' in c else f'p.{c}' for c in _HEAD_COLUMNS)}, "
    "(SELECT max(g.first_seen_at) FROM intake_gap g WHERE g.msg_id < p.msg_id "
    "AND g.passed_at IS NULL AND g.arrived_at IS NULL) AS gap_seen, (SELECT held FROM w) AS writer_held "
    f"FROM proc_state p WHERE p.status IN {_OPEN_SQL} AND p.msg_id >= %(start)s ORDER BY p.msg_id LIMIT %(limit)s")


def head(conn: Connection, *, pid: int, writer_row: str) -> QueueHead | None:
    """The queue head, locking the writer row ``writer_row`` of ``pipeline_lock`` (transaction 1
    starts here); ``pid`` is the backend that took the writer's advisory lock (-1: none)."""
    found = heads(conn, pid=pid, writer_row=writer_row, limit=1)
    return found[0] if found else None


def heads(conn: Connection, *, pid: int, writer_row: str, limit: int, start: int = 0) -> list[QueueHead]:
    """The head and up to ``limit - 1`` open messages after it, in id order, in the one statement
    that locks the writer row: a group's later heads as they stand in this transaction (P11, read-ahead).
    ``start``: no message below this id is open (the pump's ``QueueFloor``, P40, queue floor)."""
    rows = conn.exec_driver_sql(_HEAD_SQL, {"pid": pid, "name": writer_row, "limit": limit, "start": start})
    return [QueueHead(*row) for row in rows]


def pass_gaps(conn: Connection, head_id: int, now: datetime) -> int:
    """Expired gaps below the head are recorded as passed (US-01 AC5)."""
    return conn.execute(update(intake_gap).where(
        intake_gap.c.msg_id < head_id, intake_gap.c.passed_at.is_(None),
        intake_gap.c.arrived_at.is_(None)).values(passed_at=now)).rowcount


# --- the guarded writes ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Bind:
    """An identity to bind in a guarded write (INV-9, D26; ``store.identity``)."""

    identity: str
    payload_hash: str | None
    window: timedelta


_APPLIED_SQL = (
    "WITH u AS (UPDATE proc_state SET applied_at = %(now)s, updated_at = %(now)s, identity_key = %(b_identity)s, "
    "payload_hash = %(b_payload_hash)s, msg_type = %(msg_type)s, msg_styp = %(msg_styp)s "
    f"WHERE msg_id = %(msg_id)s AND status IN {_OPEN_SQL} AND applied_at IS NULL "
    "AND pg_backend_pid() = %(pid)s RETURNING msg_id, created_at), "
    f"{identity.binding_cte('u')} SELECT (SELECT count(*) FROM u), (SELECT count(*) FROM b)")


def mark_applied(conn: Connection, msg_id: int, *, now: datetime, bind: Bind, msg_type: str, msg_styp: str,
                 pid: int) -> bool:
    """``applied_at`` and the identity binding, guarded: False when the row is no longer open,
    was already applied, or this session lost the writer lock; ``IdentityTaken`` when another row
    holds the identity inside the window (the caller rolls back)."""
    params = {"now": now, "msg_type": msg_type, "msg_styp": msg_styp, "msg_id": msg_id, "pid": pid,
              **identity.binding_params(bind.identity, bind.payload_hash, bind.window)}
    return _bound(conn.exec_driver_sql(_APPLIED_SQL, params).one())


def _bound(counts: Row) -> bool:
    """(rows written, identities bound) of a guarded write -> written; a write whose identity did
    not bind raises ``IdentityTaken``."""
    written, bound = counts
    if written == 1 and bound == 0:
        raise identity.IdentityTaken("the identity is bound to another message inside the window")
    return bool(written == 1)


# A terminal status's backfill todo and event release, for the rows ``u`` wrote (INV-8).
_TODO_CTE = ("t AS (INSERT INTO backfill_todo (msg_id, status, created_at) "
             f"SELECT msg_id, '{TodoStatus.PENDING}', %(now)s::timestamptz FROM u ON CONFLICT (msg_id) DO NOTHING)")
_RELEASE_CTE = ("e AS (UPDATE msg_event SET released_at = %(now)s::timestamptz "
                "WHERE msg_id IN (SELECT msg_id FROM u) AND released_at IS NULL)")


@cache
def _status_sql(columns: tuple[str, ...], terminal: bool, writer_guard: bool, bind: bool) -> str:
    """The guarded status write for one set of columns (INV-8): the status, its history row and,
    when terminal, the backfill todo and the event release, and when asked the identity binding
    (D26), all in one statement. Without ``writer_guard`` (an operator's action, which holds the
    writer row lock instead of the pump's advisory lock) only the row's being open is checked."""
    sets = ", ".join(f"{c} = %(v_{c})s" for c in columns)
    guard = " AND pg_backend_pid() = %(pid)s" if writer_guard else ""
    returning = "msg_id, created_at, status, msg_type, msg_styp" if terminal else "msg_id, created_at"
    parts = [
        f"u AS (UPDATE proc_state SET {sets} WHERE msg_id = %(msg_id)s AND status IN {_OPEN_SQL}"
        f"{guard} RETURNING {returning})",
        "h AS (INSERT INTO proc_state_hst (msg_id, status, reason, error_class, error_detail, attempt, at) "
        "SELECT msg_id, %(h_status)s::text, %(h_reason)s::text, %(h_error_class)s::text, "
        "%(h_error_detail)s::text, %(h_attempt)s::int, %(now)s::timestamptz FROM u)"]
    if terminal:     # ... and the durable totals of what ended (``store.metric_totals``)
        parts += [_TODO_CTE, _RELEASE_CTE, metric_totals.terminal_cte("u")]
    if bind:
        parts.append(identity.binding_cte("u"))
    bound = "(SELECT count(*) FROM b)" if bind else "1"
    return f"WITH {', '.join(parts)} SELECT (SELECT count(*) FROM u), {bound}"


@dataclass(frozen=True)
class HistoryRow:
    status: Status
    reason: str | None = None
    error_class: str | None = None
    error_detail: str | None = None
    attempt: int | None = None


def write_status(conn: Connection, msg_id: int, values: dict[str, object], *, terminal: bool,
                 history: HistoryRow, now: datetime, pid: int | None, bind: Bind | None = None) -> bool:
    """One guarded statement: ``values`` on the row (which must still be open, written by the
    backend that holds the writer lock; ``pid=None``: an operator's action under the writer row
    lock), its history row and, when ``terminal``, the backfill todo and the release of the
    message's outbox events; with ``bind`` also the identity binding (its readable text goes to
    ``identity_key``). False when refused; ``IdentityTaken`` when another row holds the identity
    inside the window (the caller rolls back)."""
    columns = tuple(sorted(values))
    params = {f"v_{c}": values[c] for c in columns}
    params.update({"h_status": str(history.status), "h_reason": history.reason,
                   "h_error_class": history.error_class, "h_error_detail": history.error_detail,
                   "h_attempt": history.attempt})
    params.update(msg_id=msg_id, now=now, pid=pid)
    if bind is not None:
        params.update(identity.binding_params(bind.identity, bind.payload_hash, bind.window))
    sql = _status_sql(columns, terminal, pid is not None, bind is not None)
    return _bound(conn.exec_driver_sql(sql, params).one())


@dataclass(frozen=True)
class Applied:
    """One message of a group that applied its state: its terminal SUCCEEDED row (P13, write-behind)."""

    msg_id: int
    applied_at: datetime
    msg_type: str
    msg_styp: str
    payload_hash: str | None
    identity: str


# A group's rows travel as one JSON array (P13); ``u`` returns what the identity binding needs.
_GROUP_ROWS_CTE = (
    "v AS (SELECT * FROM json_to_recordset(%(rows)s::json) AS x(msg_id bigint, applied_at timestamptz, "
    "msg_type text, msg_styp text, payload_hash text, identity text, b_hash text))")
_GROUP_RETURNING = ("RETURNING p.msg_id, p.created_at, p.status, p.msg_type, p.msg_styp, v.b_hash, "
                    "v.identity AS b_identity, v.payload_hash AS b_payload_hash")
_APPLIED_COLUMNS = ("applied_at = v.applied_at, msg_type = v.msg_type, msg_styp = v.msg_styp, "
                    "payload_hash = v.payload_hash, identity_key = v.identity")
_GUARD = "AND pg_backend_pid() = %(pid)s"
# What a terminal SUCCEEDED writes beside the row (INV-8): its history row, in id order so history
# ids follow it, the backfill todo, the release of its events and the durable totals.
_SUCCEEDED = (f"h AS (INSERT INTO proc_state_hst (msg_id, status, at) "
              f"SELECT msg_id, '{Status.SUCCEEDED}', %(now)s::timestamptz FROM u ORDER BY msg_id), "
              f"{_TODO_CTE}, {_RELEASE_CTE}, {metric_totals.terminal_cte('u')}")
_SUCCEEDED_SET = (f"status = '{Status.SUCCEEDED}', reason = NULL, error_detail = NULL, terminal_at = %(now)s, "
                  "updated_at = %(now)s, next_attempt_at = NULL, dup_of = NULL")

# The terminal SUCCEEDED of a whole folded group in one statement (P13): what ``write_status``
# writes for each of them (status, history, backfill todo, event release, identity binding),
# guarded the same way.
_APPLIED_GROUP_SQL = (
    f"WITH {_GROUP_ROWS_CTE}, "
    f"u AS (UPDATE proc_state p SET {_SUCCEEDED_SET}, {_APPLIED_COLUMNS} "
    f"FROM v WHERE p.msg_id = v.msg_id AND p.status IN {_OPEN_SQL} {_GUARD} {_GROUP_RETURNING}), "
    f"{_SUCCEEDED}, {identity.binding_cte('u', per_row=True)} "
    "SELECT (SELECT count(*) FROM u), (SELECT count(*) FROM b)")

# Transaction 1's ``applied_at`` and identity binding of a whole two-transaction group (P16, two-transaction
# write-behind): what ``mark_applied`` writes for each of them, guarded the same way.
_MARK_GROUP_SQL = (
    f"WITH {_GROUP_ROWS_CTE}, "
    f"u AS (UPDATE proc_state p SET updated_at = %(now)s, {_APPLIED_COLUMNS} "
    f"FROM v WHERE p.msg_id = v.msg_id AND p.status IN {_OPEN_SQL} AND p.applied_at IS NULL {_GUARD} "
    f"{_GROUP_RETURNING}), {identity.binding_cte('u', per_row=True)} "
    "SELECT (SELECT count(*) FROM u), (SELECT count(*) FROM b)")

# ... and its transaction 2 once the post-commit steps are done: the terminal SUCCEEDED of every
# applied message, what ``write_status`` writes for each of them (the identity is bound already).
_FINISH_GROUP_SQL = (
    f"WITH u AS (UPDATE proc_state p SET {_SUCCEEDED_SET} WHERE p.msg_id = ANY(%(ids)s) "
    f"AND p.status IN {_OPEN_SQL} AND p.applied_at IS NOT NULL {_GUARD} "
    "RETURNING p.msg_id, p.created_at, p.status, p.msg_type, p.msg_styp), "
    f"{_SUCCEEDED} SELECT count(*) FROM u")


def _group_rows(conn: Connection, sql: str, rows: list[Applied], *, now: datetime, pid: int,
                window: timedelta) -> bool:
    """Run a group statement over ``rows`` (in id order) with their identity bindings: False when
    any row was refused (not open, or this session lost the writer lock); ``IdentityTaken`` when
    any identity is held by another row inside the window, or two of them are the same. Either
    way the caller rolls the transaction back."""
    data = [{"msg_id": r.msg_id, "applied_at": r.applied_at.isoformat(), "msg_type": r.msg_type,
             "msg_styp": r.msg_styp, "payload_hash": r.payload_hash, "identity": r.identity,
             "b_hash": identity.identity_hash(r.identity)} for r in sorted(rows, key=lambda r: r.msg_id)]
    if len({d["b_hash"] for d in data}) < len(data):
        raise identity.IdentityTaken("two messages of one group carry the same identity")
    written, bound = conn.exec_driver_sql(sql, {
        "rows": orjson.dumps(data).decode(), "now": now, "pid": pid, "b_window": window}).one()
    if written == len(rows) and bound < written:
        raise identity.IdentityTaken("an identity of the group is bound to another message inside the window")
    return bool(written == len(rows))


def write_applied(conn: Connection, rows: list[Applied], *, now: datetime, pid: int, window: timedelta) -> bool:
    """The terminal SUCCEEDED of every message in ``rows`` with its identity bound, in one guarded
    statement (P13); refusals as ``_group_rows`` says."""
    return _group_rows(conn, _APPLIED_GROUP_SQL, rows, now=now, pid=pid, window=window)


def mark_applied_many(conn: Connection, rows: list[Applied], *, now: datetime, pid: int, window: timedelta) -> bool:
    """``applied_at`` and the identity binding of every message in ``rows``, in one guarded
    statement (P16; transaction 1 stays open); refusals as ``_group_rows`` says, and a row
    already applied is refused too."""
    return _group_rows(conn, _MARK_GROUP_SQL, rows, now=now, pid=pid, window=window)


def finish_applied(conn: Connection, msg_ids: list[int], *, now: datetime, pid: int) -> bool:
    """Transaction 2 of applied messages whose post-commit steps are done (P16): terminal SUCCEEDED,
    history, backfill todo and event release of each, in one guarded statement. False when any
    row was refused (not open, not applied, or this session lost the writer lock)."""
    written = conn.exec_driver_sql(_FINISH_GROUP_SQL, {"ids": sorted(msg_ids), "now": now, "pid": pid}).scalar_one()
    return bool(written == len(msg_ids))


def note_error(conn: Connection, msg_id: int, error_class: str, detail: str, now: datetime) -> None:
    """Record why the head waits without using an attempt (e.g. the mailbox is unreachable)."""
    conn.execute(update(proc_state).where(proc_state.c.msg_id == msg_id).values(
        error_class=error_class, error_detail=detail[:2000], updated_at=now))


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
    over with), for ``ids``: what an answer among them is judged by (L2, L16)."""
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


# --- backfill todos ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Todo:
    msg_id: int
    attempts: int


def _due(now: datetime):
    return (IS_PENDING_TODO,
            or_(backfill_todo.c.next_attempt_at.is_(None), backfill_todo.c.next_attempt_at <= now))


def claim_todos(conn: Connection, now: datetime, limit: int) -> list[Todo]:
    """Due todos in id order, row-locked ``SKIP LOCKED`` (the pump's inline backfill and the
    backfill job never work on the same rows)."""
    rows = conn.execute(select(backfill_todo.c.msg_id, backfill_todo.c.attempts).where(*_due(now))
                        .order_by(backfill_todo.c.msg_id).limit(limit).with_for_update(skip_locked=True))
    return [Todo(r.msg_id, r.attempts) for r in rows]


def back_off_todos(conn: Connection, ids: list[int], error: str, next_attempt_at: datetime) -> None:
    conn.execute(update(backfill_todo).where(backfill_todo.c.msg_id.in_(ids)).values(
        attempts=backfill_todo.c.attempts + 1, last_error=error[:1000], next_attempt_at=next_attempt_at))


def settle_todos(conn: Connection, status: TodoStatus, ids: list[int], done_at: datetime,
                 error: str | None = None) -> None:
    if ids:
        conn.execute(update(backfill_todo).where(backfill_todo.c.msg_id.in_(sorted(ids))).values(
            status=status, done_at=done_at, last_error=error, attempts=backfill_todo.c.attempts + 1))


def pending_todos(conn: Connection) -> int:
    return int(conn.execute(select(func.count()).select_from(backfill_todo)
                            .where(IS_PENDING_TODO)).scalar_one())


def due_todos(conn: Connection, now: datetime) -> int:
    return int(conn.execute(select(func.count()).select_from(backfill_todo).where(*_due(now))).scalar_one())


# --- figures (pump, monitor, CLI) ------------------------------------------------------------------------
def open_count(conn: Connection) -> int:
    return int(conn.execute(select(func.count()).select_from(proc_state)
                            .where(IS_OPEN)).scalar_one())


def open_summary(conn: Connection) -> tuple[int, datetime | None]:
    """How many messages are open, and when the oldest was registered."""
    count, oldest = conn.execute(select(func.count(), func.min(proc_state.c.created_at))
                                 .where(IS_OPEN)).one()
    return int(count), oldest


def dead_count(conn: Connection) -> int:
    return int(conn.execute(select(func.count()).where(proc_state.c.status == Status.DEAD)).scalar_one())


def status_counts(conn: Connection) -> dict[str, int]:
    rows = conn.execute(select(proc_state.c.status, func.count()).group_by(proc_state.c.status)).fetchall()
    return {r[0]: int(r[1]) for r in rows}


def status_counts_of(conn: Connection, ids: list[int]) -> dict[str, int]:
    """Status counts over the given messages (what a recovery's replay came to)."""
    rows = conn.execute(select(proc_state.c.status, func.count()).where(proc_state.c.msg_id.in_(ids))
                        .group_by(proc_state.c.status)).fetchall()
    return {r[0]: int(r[1]) for r in rows}


def reason_counts(conn: Connection) -> list[tuple[str, str | None, int]]:
    rows = conn.execute(select(proc_state.c.status, proc_state.c.reason, func.count())
                        .group_by(proc_state.c.status, proc_state.c.reason)
                        .order_by(proc_state.c.status, proc_state.c.reason)).fetchall()
    return [(r[0], r[1], int(r[2])) for r in rows]


def outcome_counts(conn: Connection) -> list[tuple[str | None, str | None, str, str | None, int]]:
    """(TYPE, STYP, status, reason, count) over every registered message (the demo's summary)."""
    ps = proc_state.c
    rows = conn.execute(select(ps.msg_type, ps.msg_styp, ps.status, ps.reason, func.count())
                        .group_by(ps.msg_type, ps.msg_styp, ps.status, ps.reason)).fetchall()
    return [(r[0], r[1], r[2], r[3], int(r[4])) for r in rows]


def head_summary(conn: Connection) -> tuple[int, int | None, datetime | None]:
    """(open messages, the head's mailbox id, the oldest open registration): the queue depth and
    head age of the monitor, one statement over the partial open index."""
    count, head, oldest = conn.execute(select(func.count(), func.min(proc_state.c.msg_id),
                                              func.min(proc_state.c.created_at))
                                       .where(IS_OPEN)).one()
    return int(count), head, oldest


def backfill_summary(conn: Connection) -> tuple[int, datetime | None]:
    """(mailbox marks still to write, when the oldest of them was queued): the backfill lag."""
    count, oldest = conn.execute(select(func.count(), func.min(backfill_todo.c.created_at))
                                 .where(IS_PENDING_TODO)).one()
    return int(count), oldest


def recent_types_with(conn: Connection, status: Status, reason: str, since: datetime) -> list[tuple[str, int]]:
    """``TYPE-STYP`` and count of messages registered since ``since`` that ended ``status(reason)``
    (the unsupported-types check: which types the AODB sends that msgx does not know)."""
    ps = proc_state.c
    label = func.concat(func.coalesce(ps.msg_type, "?"), "-", func.coalesce(ps.msg_styp, "?"))
    rows = conn.execute(select(label, func.count()).where(ps.status == status, ps.reason == reason,
                                                          ps.created_at >= since)
                        .group_by(label).order_by(label)).fetchall()
    return [(r[0], int(r[1])) for r in rows]


def processing_span(conn: Connection) -> tuple[datetime | None, datetime | None]:
    """First registration and last terminal status."""
    first, last = conn.execute(select(func.min(proc_state.c.created_at), func.max(proc_state.c.terminal_at))).one()
    return first, last


def applied_open_ids() -> Select:
    """Messages between transaction 1 and 2 (applied, not yet terminal): a subquery."""
    return select(proc_state.c.msg_id).where(proc_state.c.applied_at.is_not(None), IS_OPEN)


# --- operator actions (replay, skip) ------------------------------------------------------------
# Not the pump: these run from `msgx replay`/`msgx skip` (or their Dagster jobs) with the writer
# row of ``pipeline_lock`` locked (``locks.lock_writer_row``) and the selected rows FOR UPDATE,
# so they never interleave with a message's transaction 1.
@dataclass(frozen=True)
class QueueRow:
    """A registered message as an operator sees it."""

    msg_id: int
    status: Status
    reason: str | None
    error_class: str | None
    error_detail: str | None
    attempts: int
    created_at: datetime
    next_attempt_at: datetime | None
    applied_at: datetime | None
    terminal_at: datetime | None
    requeued_at: datetime | None
    msg_type: str | None
    msg_styp: str | None
    acknowledged_at: datetime | None = None     # an operator closed it without a replay
    acknowledged_by: str | None = None

    @property
    def waits_for_operator(self) -> bool:
        """DEAD or SKIPPED(unsupported) and not acknowledged: the set ``tables.ATTENTION_WHERE``
        names, which the dead-letter count, archiving's retention and acknowledging share."""
        attention = self.status == Status.DEAD or (self.status == Status.SKIPPED and self.reason == "unsupported")
        return attention and self.acknowledged_at is None

    @property
    def replayable_dead(self) -> bool:
        """DEAD of a cause a replay fixes once it is gone (``REPLAYABLE_DEAD``): closing it without a
        replay would lose its business effect."""
        return self.status == Status.DEAD and self.reason in REPLAYABLE_DEAD


_ROW_COLUMNS = tuple(f for f in QueueRow.__dataclass_fields__)


@dataclass(frozen=True)
class Selection:
    """Which messages an operator means: every given criterion must hold. Never "everything"."""

    ids: tuple[int, ...] = ()
    statuses: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()      # matches reason or error_class, case-insensitive
    since: datetime | None = None      # registration time (created_at), inclusive
    until: datetime | None = None      # exclusive

    @property
    def empty(self) -> bool:
        return not (self.ids or self.statuses or self.reasons or self.since or self.until)

    def as_json(self) -> dict[str, object]:
        return {"ids": list(self.ids), "statuses": list(self.statuses), "reasons": list(self.reasons),
                "since": self.since.isoformat() if self.since else None,
                "until": self.until.isoformat() if self.until else None}


def select_messages(conn: Connection, sel: Selection, *, limit: int, for_update: bool = False) -> list[QueueRow]:
    """The messages ``sel`` names, in id order, at most ``limit``."""
    if sel.empty:
        raise ValueError("a selection is required (ids, status, reason or a time range)")
    c = proc_state.c
    q = select(*[c[n] for n in _ROW_COLUMNS]).order_by(c.msg_id).limit(limit)
    if sel.ids:
        q = q.where(c.msg_id.in_(list(sel.ids)))
    if sel.statuses:
        q = q.where(c.status.in_([s.upper() for s in sel.statuses]))
    if sel.reasons:
        wanted = [r.lower() for r in sel.reasons]
        q = q.where(or_(func.lower(c.reason).in_(wanted), func.lower(c.error_class).in_(wanted)))
    if sel.since is not None:
        q = q.where(c.created_at >= sel.since)
    if sel.until is not None:
        q = q.where(c.created_at < sel.until)
    if for_update:
        q = q.with_for_update()
    return [QueueRow(*r) for r in conn.execute(q)]


_REQUEUE_SQL = (
    "WITH u AS (UPDATE proc_state SET status = %(pending)s, reason = NULL, attempts = 0, "
    "next_attempt_at = NULL, terminal_at = NULL, dup_of = NULL, requeued_at = %(now)s, updated_at = %(now)s, "
    "acknowledged_at = NULL, acknowledged_by = NULL "
    "WHERE msg_id = ANY(%(ids)s) RETURNING msg_id), "
    "h AS (INSERT INTO proc_state_hst (msg_id, status, reason, error_detail, attempt, at) "
    "SELECT msg_id, %(pending)s, 'replay', %(note)s, 0, %(now)s FROM u), "
    f"t AS (DELETE FROM backfill_todo WHERE msg_id IN (SELECT msg_id FROM u) AND status = '{TodoStatus.PENDING}') "
    "SELECT msg_id FROM u ORDER BY msg_id")


def requeue(conn: Connection, msg_ids: list[int], *, now: datetime, note: str) -> list[int]:
    """Re-queue messages an operator replays (US-10 AC3): PENDING with attempts and backoff reset
    and ``requeued_at`` set; the registration time, the identity binding, ``applied_at`` and the
    error columns stay (the history row records the replay). An operator's acknowledgement is
    cleared: if the message ends DEAD again it waits for an operator anew. A mark not yet written
    is withdrawn: the message is open again and will write its own when it ends. Returns the
    re-queued ids."""
    if not msg_ids:
        return []
    rows = conn.exec_driver_sql(_REQUEUE_SQL, {"pending": str(Status.PENDING), "now": now,
                                               "note": note[:2000], "ids": sorted(msg_ids)})
    return [r[0] for r in rows]


def operator_skip(conn: Connection, msg_id: int, *, now: datetime, detail: str) -> bool:
    """End an open message SKIPPED(operator_skip): history, backfill todo and event release in
    the one status statement. False when the row is no longer open."""
    values: dict[str, object] = {"status": Status.SKIPPED, "reason": "operator_skip", "error_detail": detail,
                                 "terminal_at": now, "updated_at": now, "next_attempt_at": None}
    return write_status(conn, msg_id, values, terminal=True, now=now, pid=None,
                        history=HistoryRow(Status.SKIPPED, "operator_skip", None, detail[:2000]))


_ACKNOWLEDGE_SQL = (
    "UPDATE proc_state SET acknowledged_at = %(now)s, acknowledged_by = %(operator)s, updated_at = %(now)s "
    f"WHERE msg_id = ANY(%(ids)s) AND {ATTENTION_WHERE} RETURNING msg_id")


def acknowledge(conn: Connection, msg_ids: list[int], *, now: datetime, operator: str) -> list[int]:
    """Close messages that wait for an operator (DEAD, SKIPPED(unsupported)) without a replay:
    ``acknowledged_at``/``acknowledged_by`` set, status and history untouched, so the message
    stays what it was and leaves the dead-letter count. A row that no longer waits for an
    operator is left alone. Returns the acknowledged ids, in id order."""
    if not msg_ids:
        return []
    rows = conn.exec_driver_sql(_ACKNOWLEDGE_SQL, {"now": now, "operator": operator, "ids": sorted(msg_ids)})
    return sorted(r[0] for r in rows)


def todo_states(conn: Connection, msg_ids: list[int]) -> dict[int, tuple[str, datetime | None]]:
    """The backfill todo of each message (status, done_at); absent: no mark owed yet."""
    if not msg_ids:
        return {}
    rows = conn.execute(select(backfill_todo.c.msg_id, backfill_todo.c.status, backfill_todo.c.done_at)
                        .where(backfill_todo.c.msg_id.in_(msg_ids)))
    return {r.msg_id: (r.status, r.done_at) for r in rows}
