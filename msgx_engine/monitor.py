"""Read-only backlog figures for sensors, asset checks and the CLI: no writes, cheap queries.

The mailbox side is bounded by primary key above the largest registered id, so it stays flat as
the mailbox grows (DESIGN §2.1).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, func, select

from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.store.tables import backfill_todo, msg_event, proc_state


@dataclass(frozen=True)
class Backlog:
    unregistered: int            # mailbox rows above the largest registered id, unmarked
    open_messages: int           # registered, not terminal (PENDING/FAILED)
    backfill_pending: int        # terminal, mailbox mark not yet written
    dead: int
    oldest_open_created_at: datetime | None
    top_mailbox_id: int
    unsent_events: int

    @property
    def processable(self) -> bool:
        return self.unregistered > 0 or self.open_messages > 0 or self.backfill_pending > 0


def backlog(engine: Engine, mailbox: Mailbox, *, probe_limit: int = 1000) -> Backlog:
    with engine.connect() as conn:
        max_registered = conn.execute(select(func.coalesce(func.max(proc_state.c.msg_id), 0))).scalar_one()
        open_count, oldest = conn.execute(
            select(func.count(), func.min(proc_state.c.created_at))
            .where(proc_state.c.status.in_(("PENDING", "FAILED")))).one()
        dead = conn.execute(select(func.count()).where(proc_state.c.status == "DEAD")).scalar_one()
        todo = conn.execute(select(func.count()).select_from(backfill_todo)
                            .where(backfill_todo.c.status == "PENDING")).scalar_one()
        unsent = conn.execute(select(func.count()).select_from(msg_event).where(
            msg_event.c.released_at.is_not(None), msg_event.c.sent_at.is_(None),
            msg_event.c.dead_at.is_(None))).scalar_one()
    new_ids = mailbox.unprocessed_ids(int(max_registered), probe_limit)
    return Backlog(unregistered=len(new_ids), open_messages=int(open_count), backfill_pending=int(todo),
                   dead=int(dead), oldest_open_created_at=oldest,
                   top_mailbox_id=new_ids[-1] if new_ids else int(max_registered), unsent_events=int(unsent))
