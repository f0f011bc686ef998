"""The message queue's per-message statements: the pump's head query and its guarded writes.

``proc_state`` holds one row per registered mailbox message (its ``Status``, attempts, identity
binding, ``applied_at``), ``proc_state_hst`` its history, ``backfill_todo`` the mailbox marks still
to write, ``intake_gap`` the holes in the id sequence the head waits for, and ``intake_state`` the
intake's bookkeeping. The statements over them live in ``store`` by what they serve: here the
pump's per-message ones, intake in ``store.registration``, the mailbox marks to write in
``store.backfill_todos``, the counts in ``store.queue_figures`` and the operator's actions in
``store.queue_selection``.

The per-message statements of the pump are plain SQL built once and sent with
``exec_driver_sql`` (no statement construction or compilation per message, DESIGN §6), and the
guarded status write is one statement that also writes the history, the backfill todo and the
event release (INV-8). The rest is SQLAlchemy Core: it runs once per batch or scan.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache

import orjson
from sqlalchemy import Connection, Row, update

from msgx_engine.store import identity, metric_totals
from msgx_engine.store.status import OPEN, Status, TodoStatus, sql_in
from msgx_engine.store.tables import intake_gap, proc_state

log = logging.getLogger(__name__)

__all__ = ["OPEN", "Status", "TodoStatus", "QueueHead", "Bind"]

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
    error_class: str | None        # why the last attempt failed or the head waits (D22, D24, vanished mailbox row)
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
