"""An operator ends an open message that cannot proceed: SKIPPED(operator_skip), audited (D24, vanished mailbox row).

The queue head never passes an open message on its own (INV-3). When one cannot proceed (its
mailbox row vanished before processing, C-12/D24, or it waits on something that will not come
back), an operator may end it: status SKIPPED with reason ``operator_skip``, a history row, the
backfill todo (the mark is written where the row still exists) and one audit row with its item,
all in one transaction under the writer row lock. A message whose state transaction 1 already
applied is refused: it only waits for its post-commit step, and skipping it would leave its
events unreleased and its state unannounced.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine

from msgx_engine.store import audit, locks, queue_selection
from msgx_engine.store.queue_selection import Selection
from msgx_engine.store.status import OPEN, Status


@dataclass(frozen=True)
class SkipResult:
    msg_id: int
    before: str | None
    refusal: str | None
    audit_id: int

    @property
    def skipped(self) -> bool:
        return self.refusal is None


def skip_refusal(row: queue_selection.QueueRow | None) -> str | None:
    """Why a message may not be skipped (None: it may)."""
    if row is None:
        return "refused: no such registered message"
    if row.status not in OPEN:
        return f"refused: already {row.status}" + (f"({row.reason})" if row.reason else "")
    if row.applied_at is not None:
        return "refused: its state is applied; it only waits for its post-commit step (fix that instead)"
    return None


def skip(engine: Engine, msg_id: int, *, operator: str, reason: str, now: datetime) -> SkipResult:
    """Skip ``msg_id`` if it is open and unapplied; audit the request either way."""
    if not operator.strip() or not reason.strip():
        raise ValueError("skip needs --operator NAME and --reason TEXT")
    with engine.connect() as conn, conn.begin():
        locks.lock_writer_row(conn)
        rows = queue_selection.select_messages(conn, Selection(ids=(msg_id,)), limit=1, for_update=True)
        row = rows[0] if rows else None
        refused = skip_refusal(row)
        audit_id = audit.record(conn, operator, "skip", reason, {"ids": [msg_id]})
        before = str(row.status) if row else None
        if refused is None:
            detail = f"skipped by {operator.strip()} (audit {audit_id}): {reason.strip()}"
            if not queue_selection.operator_skip(conn, msg_id, now=now, detail=detail):
                refused = "refused: the message is no longer open"
        after = str(Status.SKIPPED) if refused is None else before
        audit.record_items(conn, audit_id, [audit.AuditItem(msg_id, before, after, refused or "skipped")])
        audit.set_outcome(conn, audit_id, {"skipped": int(refused is None), "refused_because": refused})
    return SkipResult(msg_id, before, refused, audit_id)
