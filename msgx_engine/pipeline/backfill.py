"""Backfill (US-09, C-15): write ``CMINMSGS_DATE_PROCESSED`` for terminal messages, only where NULL.

Works from durable ``backfill_todo`` rows (written in the same statement as the terminal status,
INV-8), so a MySQL outage only delays marks: processing in PostgreSQL never waits for it. A
batch is claimed with ``FOR UPDATE SKIP LOCKED``, so the pump's inline backfill and the Dagster
``backfill_job`` never work on the same rows. Marking costs two mailbox statements per batch,
not one per row. Rows that cannot be marked (gone from the mailbox) are recorded as FAILED.
A shadow instance (D29, shadow mode, read-only mailbox) never marks: its todos end SHADOW, the record of the
mark production writes, so nothing is left pending and archiving proceeds as in production.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, fields

from sqlalchemy import Connection, Engine

from msgx_engine import faults
from msgx_engine.clock import Clock, local_wall_time
from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.pipeline.policy import RetryPolicy
from msgx_engine.store import backfill_todos
from msgx_engine.store.queue import TodoStatus

log = logging.getLogger(__name__)

BACKOFF = RetryPolicy(max_attempts=10**9, base_delay_s=1.0, max_delay_s=60.0)


@dataclass
class BackfillStats:
    marked: int = 0
    already: int = 0
    missing: int = 0
    failed_attempts: int = 0
    shadowed: int = 0          # shadow mode: settled without writing the mailbox
    pending: int = 0

    def add(self, other: BackfillStats) -> None:
        for f in fields(self):
            if f.name != "pending":
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @property
    def settled(self) -> int:
        return self.marked + self.already + self.missing + self.shadowed


class Backfill:
    def __init__(self, mailbox: Mailbox, clock: Clock, *, batch: int = 500) -> None:
        self.mailbox = mailbox
        self.clock = clock
        self.batch = batch

    def run_once(self, conn: Connection) -> BackfillStats:
        """Mark one batch of due todos. A mailbox failure backs the batch off and returns.

        Every way out commits the batch: its claim keeps the rows locked until then, and ``drain``
        runs batch after batch on one connection. The pump runs a batch inside ``writer_scope``,
        whose own commit then finds nothing left to send."""
        stats = BackfillStats()
        now = self.clock.now()
        todos = backfill_todos.claim_todos(conn, now, self.batch)
        if not todos:
            conn.commit()
            return stats
        ids = [t.msg_id for t in todos]
        if self.mailbox.read_only:
            backfill_todos.settle_todos(conn, TodoStatus.SHADOW, ids, self.clock.now(),
                                        "shadow mode: the mark is production's to write, not written here")
            conn.commit()
            stats.shadowed = len(ids)
            return stats
        try:
            marks = self.mailbox.mark_where_null(ids, local_wall_time(now))
        except Exception as exc:  # MySQL down or unreachable: retry later, keep processing
            attempts = max(t.attempts for t in todos) + 1
            backfill_todos.back_off_todos(conn, ids, f"{type(exc).__name__}: {exc}",
                                          BACKOFF.next_attempt_at(attempts, now))
            conn.commit()
            log.warning("backfill of %s row(s) failed, retrying later: %s", len(ids), exc.__class__.__name__)
            stats.failed_attempts = len(ids)
            return stats
        faults.reach("inside_backfill")
        done_at = self.clock.now()
        backfill_todos.settle_todos(conn, TodoStatus.DONE, sorted(marks.marked), done_at)
        backfill_todos.settle_todos(conn, TodoStatus.ALREADY, sorted(marks.already), done_at)
        backfill_todos.settle_todos(conn, TodoStatus.FAILED, sorted(marks.missing), done_at, "mailbox row not found")
        conn.commit()
        if marks.missing:
            log.error("ALERT backfill: mailbox rows %s not found, cannot mark", sorted(marks.missing)[:20])
        stats.marked, stats.already, stats.missing = len(marks.marked), len(marks.already), len(marks.missing)
        return stats

    def drain(self, conn: Connection, *, max_seconds: float | None = None) -> BackfillStats:
        """Run batches until nothing is due (or a batch fails, or time is up)."""
        total = BackfillStats()
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        while deadline is None or time.monotonic() < deadline:
            s = self.run_once(conn)
            total.add(s)
            if s.settled == 0:
                break
        total.pending = pending_count(conn)
        return total


def pending_count(conn: Connection) -> int:
    n = backfill_todos.pending_todos(conn)
    conn.commit()
    return n


def run_backfill(engine: Engine, mailbox: Mailbox, clock: Clock, max_seconds: float = 50.0) -> BackfillStats:
    """Entry point for the Dagster ``backfill_job``: drain due todos for at most ``max_seconds``.

    Safe to run beside the pump (rows are claimed with SKIP LOCKED); needs no writer lock.
    """
    with engine.connect() as conn:
        return Backfill(mailbox, clock).drain(conn, max_seconds=max_seconds)
