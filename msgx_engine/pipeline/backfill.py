"""Backfill (US-09, C-15): write ``CMINMSGS_DATE_PROCESSED`` for terminal messages, only where NULL.

Works from durable ``backfill_todo`` rows (written in the same statement as the terminal status,
INV-8), so a MySQL outage only delays marks: processing in PostgreSQL never waits for it. A
batch is claimed with ``FOR UPDATE SKIP LOCKED``, so the pump's inline backfill and the Dagster
``backfill_job`` never work on the same rows. Marking costs two mailbox statements per batch,
not one per row. Rows that cannot be marked (gone from the mailbox) are recorded as FAILED.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, fields
from datetime import datetime

from sqlalchemy import Connection, Engine, func, or_, select, update

from msgx_engine import faults
from msgx_engine.clock import Clock
from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.mailbox.tables import cminmsgs
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

    def add(self, other: BackfillStats) -> None:
        for f in fields(self):
            if f.name != "pending":
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @property
    def settled(self) -> int:
        return self.marked + self.already + self.missing


def mark_where_null(mailbox: Mailbox, ids: list[int], when: datetime) -> tuple[set[int], set[int], set[int]]:
    """Mark ``ids`` where DATE_PROCESSED is NULL (C-15, INV-7). Returns (marked, already, missing)."""
    mark = cminmsgs.c.CMINMSGS_DATE_PROCESSED
    with mailbox.engine.connect() as mconn:
        present = {int(r[0]): r[1] for r in mconn.execute(
            select(cminmsgs.c.CMINMSGS_ID, mark).where(cminmsgs.c.CMINMSGS_ID.in_(ids)))}
        unmarked = [i for i, v in present.items() if v is None]
        if unmarked:
            mconn.execute(update(cminmsgs).where(cminmsgs.c.CMINMSGS_ID.in_(unmarked), mark.is_(None))
                          .values({mark: when}))
    marked = set(unmarked)
    return marked, set(present) - marked, set(ids) - set(present)


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
            .order_by(backfill_todo.c.msg_id).limit(self.batch).with_for_update(skip_locked=True)).fetchall()
        if not rows:
            conn.commit()
            return stats
        ids = [r.msg_id for r in rows]
        try:
            marked, already, missing = mark_where_null(self.mailbox, ids, datetime.now().replace(microsecond=0))
        except Exception as exc:  # MySQL down or unreachable: retry later, keep processing
            attempts = max(r.attempts for r in rows) + 1
            conn.execute(update(backfill_todo).where(backfill_todo.c.msg_id.in_(ids)).values(
                attempts=backfill_todo.c.attempts + 1, last_error=f"{type(exc).__name__}: {exc}"[:1000],
                next_attempt_at=BACKOFF.next_attempt_at(attempts, now)))
            conn.commit()
            log.warning("backfill of %s row(s) failed, retrying later: %s", len(ids), exc.__class__.__name__)
            stats.failed_attempts = len(ids)
            return stats
        faults.reach("inside_backfill")
        done_at = self.clock.now()
        for status, group, error in (("DONE", marked, None), ("ALREADY", already, None),
                                     ("FAILED", missing, "mailbox row not found")):
            if group:
                conn.execute(update(backfill_todo).where(backfill_todo.c.msg_id.in_(sorted(group))).values(
                    status=status, done_at=done_at, last_error=error, attempts=backfill_todo.c.attempts + 1))
        conn.commit()
        if missing:
            log.error("ALERT backfill: mailbox rows %s not found, cannot mark", sorted(missing)[:20])
        stats.marked, stats.already, stats.missing = len(marked), len(already), len(missing)
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
    n = conn.execute(select(func.count()).select_from(backfill_todo)
                     .where(backfill_todo.c.status == "PENDING")).scalar_one()
    conn.commit()
    return int(n)


def run_backfill(engine: Engine, mailbox: Mailbox, clock: Clock, max_seconds: float = 50.0) -> BackfillStats:
    """Entry point for the Dagster ``backfill_job``: drain due todos for at most ``max_seconds``.

    Safe to run beside the pump (rows are claimed with SKIP LOCKED); needs no writer lock.
    """
    with engine.connect() as conn:
        return Backfill(mailbox, clock).drain(conn, max_seconds=max_seconds)
