"""The operator's actions over the queue: selecting messages, and re-queuing, skipping or
acknowledging them.

Not the pump's: they run from ``msgx replay``/``skip``/``acknowledge`` (or their Dagster jobs),
so they live apart from its per-message statements (``store.queue``), whose guarded status
write an operator's skip reuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, func, or_, select

from msgx_engine.store.queue import HistoryRow, write_status
from msgx_engine.store.status import REPLAYABLE_DEAD, Status, TodoStatus
from msgx_engine.store.tables import ATTENTION_WHERE, backfill_todo, proc_state


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
