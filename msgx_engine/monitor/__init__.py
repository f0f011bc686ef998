"""Read-only backlog figures for sensors, asset checks and the CLI: no writes, cheap queries.

The mailbox side is bounded by primary key above the largest id the intake accounts for, so it stays flat as
the mailbox grows (DESIGN §2, step 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine

from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.store import backfill_todos, monitoring, outbox, queue_figures, registration


@dataclass(frozen=True)
class Backlog:
    unregistered: int            # mailbox rows above the largest id accounted for, unmarked (shadow: any)
    open_messages: int           # registered, not terminal (PENDING/FAILED)
    backfill_pending: int        # terminal, mailbox mark not yet written
    dead: int                    # DEAD messages no operator acknowledged (the dead-letter count)
    oldest_open_created_at: datetime | None
    top_mailbox_id: int          # the highest unregistered id the probe saw (its limit), else the position
    unsent_events: int
    first_unregistered_id: int | None = None    # the lowest mailbox id waiting to be registered

    def described(self) -> str:
        """Why a pump is wanted, as far as this probe saw: true for any ``probe_limit``."""
        parts = []
        if self.unregistered:
            parts.append(f"mailbox rows wait to be registered from id {self.first_unregistered_id}")
        if self.open_messages:
            parts.append(f"{self.open_messages} registered message(s) open")
        if self.backfill_pending:
            parts.append(f"{self.backfill_pending} mailbox mark(s) to write")
        return "; ".join(parts) or "nothing waits"

    @property
    def processable(self) -> bool:
        return self.unregistered > 0 or self.open_messages > 0 or self.backfill_pending > 0


def backlog(engine: Engine, mailbox: Mailbox, *, probe_limit: int = 1000) -> Backlog:
    with engine.connect() as conn:
        base = registration.intake_position(conn).accounted_for
        open_count, oldest = queue_figures.open_summary(conn)
        dead = monitoring.waiting_dead_count(conn)
        todo = backfill_todos.pending_todos(conn)
        unsent = outbox.unsent_count(conn)
    new_ids = mailbox.fresh_ids(base, probe_limit)
    return Backlog(unregistered=len(new_ids), open_messages=open_count, backfill_pending=todo,
                   dead=dead, oldest_open_created_at=oldest,
                   top_mailbox_id=new_ids[-1] if new_ids else base, unsent_events=unsent,
                   first_unregistered_id=new_ids[0] if new_ids else None)
