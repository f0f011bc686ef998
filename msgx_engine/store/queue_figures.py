"""What the queue holds, in figures: counts and spans over ``proc_state`` and ``backfill_todo``.

Read by the pump, the monitor, the CLI and the demo's summary; each runs once per pass or
report (SQLAlchemy Core), never per message, and writes nothing.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, Select, func, select

from msgx_engine.store.status import Status
from msgx_engine.store.tables import IS_OPEN, IS_PENDING_TODO, backfill_todo, proc_state


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

