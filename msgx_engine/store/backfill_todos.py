"""The backfill todos (``backfill_todo``): the mailbox marks still to write.

A terminal status writes its todo in the same statement (``store.queue``'s guarded write, INV-8);
the pump's inline backfill and the backfill job claim, back off and settle them here, once per
batch (SQLAlchemy Core).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, func, or_, select, update

from msgx_engine.store.status import TodoStatus
from msgx_engine.store.tables import IS_PENDING_TODO, backfill_todo


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

