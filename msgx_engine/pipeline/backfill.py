"""Backfill (US-09, C-15): write ``CMINMSGS_DATE_PROCESSED`` for terminal messages, only where NULL.

Works from durable ``backfill_todo`` rows, so a MySQL outage only delays marks: processing in
PostgreSQL never waits for it. Rows that cannot be marked (vanished from the mailbox) are recorded.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import Connection, or_, select, update

from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.pipeline import faults
from msgx_engine.pipeline.clock import Clock
from msgx_engine.pipeline.policy import RetryPolicy
from msgx_engine.store.tables import backfill_todo

log = logging.getLogger(__name__)

BACKOFF = RetryPolicy(max_attempts=10**9, base_delay_s=1.0, max_delay_s=60.0)


@dataclass
class BackfillStats:
    marked: int = 0
    already: int = 0
    missing: int = 0
    failed_attempts: int = 0
    pending: int = 0


class Backfill:
    def __init__(self, mailbox: Mailbox, clock: Clock, *, batch: int = 500) -> None:
        self.mailbox = mailbox
        self.clock = clock
        self.batch = batch

    def run_once(self, conn: Connection) -> BackfillStats:
        """Mark one batch of due todos. A mailbox failure backs the batch off and returns."""
        stats = BackfillStats()
        now = self.clock.now()
        rows = conn.execute(
            select(backfill_todo.c.msg_id, backfill_todo.c.attempts)
            .where(backfill_todo.c.status == "PENDING",
                   or_(backfill_todo.c.next_attempt_at.is_(None), backfill_todo.c.next_attempt_at <= now))
            .order_by(backfill_todo.c.msg_id).limit(self.batch)).fetchall()
        conn.commit()
        if not rows:
            return stats
        ids = [r.msg_id for r in rows]
        try:
            faults.reach("inside_backfill")
            marked = self.mailbox.mark_processed(ids)
            leftover = [i for i in ids if i not in marked]
            present = self.mailbox.exists(leftover) if leftover else set()
        except Exception as exc:  # MySQL down or unreachable: retry later, keep processing
            attempts = max(r.attempts for r in rows) + 1
            conn.execute(update(backfill_todo).where(backfill_todo.c.msg_id.in_(ids)).values(
                attempts=backfill_todo.c.attempts + 1, last_error=f"{type(exc).__name__}: {exc}"[:1000],
                next_attempt_at=BACKOFF.next_attempt_at(attempts, now)))
            conn.commit()
            log.warning("backfill of %s row(s) failed, retrying later: %s", len(ids), exc)
            stats.failed_attempts = len(ids)
            return stats
        done_at = self.clock.now()
        if marked:
            conn.execute(update(backfill_todo).where(backfill_todo.c.msg_id.in_(list(marked)))
                         .values(status="DONE", done_at=done_at, attempts=backfill_todo.c.attempts + 1))
        already = [i for i in leftover if i in present]
        missing = [i for i in leftover if i not in present]
        if already:
            conn.execute(update(backfill_todo).where(backfill_todo.c.msg_id.in_(already))
                         .values(status="ALREADY", done_at=done_at))
        if missing:
            conn.execute(update(backfill_todo).where(backfill_todo.c.msg_id.in_(missing))
                         .values(status="FAILED", done_at=done_at, last_error="mailbox row not found"))
            log.error("ALERT backfill: mailbox rows %s not found, cannot mark", missing[:20])
        conn.commit()
        stats.marked, stats.already, stats.missing = len(marked), len(already), len(missing)
        return stats

    def drain(self, conn: Connection) -> BackfillStats:
        total = BackfillStats()
        while True:
            s = self.run_once(conn)
            total.marked += s.marked
            total.already += s.already
            total.missing += s.missing
            total.failed_attempts += s.failed_attempts
            if s.marked + s.already + s.missing == 0:
                return total
