"""Intake (DESIGN §2 step 1, US-01): register each new mailbox row once in ``proc_state``.

Registration never parses content. The fast path reads only ids above the largest registered
one (bounded by primary key, so its cost stays flat as the mailbox grows); a late scan re-reads a
window above the low-water id every few seconds, and a compensating full scan every few minutes
catches rows that committed far below it (US-01 AC3). Holes in the id sequence are recorded as
gaps so the queue head can wait ``gap_grace_s`` for them (US-01 AC5).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from msgx_engine.clock import Clock
from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.store import queue

log = logging.getLogger(__name__)

MAX_GAP_IDS = 10_000


@dataclass
class IntakeStats:
    registered: int = 0
    late_arrivals: int = 0
    gaps_recorded: int = 0
    source_error: str | None = None


class Intake:
    def __init__(self, mailbox: Mailbox, clock: Clock, *, batch: int = 500, late_window: int = 2_000,
                 late_scan_every_s: float = 2.0, full_scan_every_s: float = 300.0) -> None:
        self.mailbox = mailbox
        self.clock = clock
        self.batch = batch
        self.late_window = late_window
        self.late_scan_every_s = late_scan_every_s
        self.full_scan_every_s = full_scan_every_s
        self._last_late: datetime | None = None
        self._last_full: datetime | None = None

    # ---------------------------------------------------------------------------------------
    def scan(self, conn: Connection, *, force_full: bool = False) -> IntakeStats:
        """One intake pass on the writer connection; commits its own transaction.

        A mailbox outage is contained here: nothing is registered this pass, ``source_error`` is
        set, and the pump keeps processing what is already registered (US-01 AC4).
        """
        stats = IntakeStats()
        now = self.clock.now()
        max_registered = queue.max_registered(conn)
        open_gaps = queue.open_gaps(conn)
        conn.commit()
        try:
            candidates = list(self.mailbox.unprocessed_ids(max_registered, self.batch))
            if open_gaps:   # a gap that commits within its grace is picked up at once
                candidates += self.mailbox.unmarked(open_gaps)
            if force_full or self._due(self._last_full, self.full_scan_every_s, now):
                candidates += self._full_scan(conn)
                self._last_full = now
                self._last_late = now
            elif self._due(self._last_late, self.late_scan_every_s, now):
                low = max(queue.low_water(conn, max_registered) - self.late_window, 0)
                candidates += self.mailbox.unprocessed_ids(low, self.batch * 4)
                self._last_late = now
            new_ids = queue.unregistered(conn, sorted(set(candidates)))
            holes = self._holes(new_ids, max_registered)
        except SQLAlchemyError as exc:
            if not isinstance(exc, OperationalError) or _is_pg_error(exc):
                raise
            conn.rollback()
            log.warning("intake: mailbox unreachable, nothing registered this pass: %s", exc.__class__.__name__)
            stats.source_error = f"{type(exc).__name__}: {exc}"[:500]
            return stats
        if new_ids:
            self._register(conn, new_ids, max_registered, now, stats, holes)
        conn.commit()
        return stats

    def _holes(self, new_ids: list[int], max_registered: int) -> list[int]:
        """Ids missing between the previous top and the new rows that do not exist in the mailbox
        (an already marked row is not a gap): the head waits ``gap_grace_s`` for them."""
        top = max_registered
        known = set(new_ids)
        holes: list[int] = []
        for i in sorted(x for x in new_ids if x > max_registered):
            if top and i > top + 1:
                holes.extend(h for h in range(top + 1, i) if h not in known)
            top = i
        if len(holes) > MAX_GAP_IDS:
            log.warning("id jump of %s ids above %s: recording the first %s as gaps", len(holes),
                        max_registered, MAX_GAP_IDS)
            holes = holes[:MAX_GAP_IDS]
        if holes:
            present = self.mailbox.exists(holes)
            holes = [h for h in holes if h not in present]
        return holes

    @staticmethod
    def _due(last: datetime | None, every_s: float, now: datetime) -> bool:
        return last is None or now - last >= timedelta(seconds=every_s)

    def _full_scan(self, conn: Connection) -> list[int]:
        found: list[int] = []
        after = 0
        while True:
            page = self.mailbox.unprocessed_ids(after, 5_000)
            if not page:
                break
            found += page
            after = page[-1]
        queue.record_full_scan(conn, self.clock.now())
        return found

    @staticmethod
    def _register(conn: Connection, new_ids: list[int], max_registered: int, now: datetime,
                  stats: IntakeStats, holes: list[int]) -> None:
        done = queue.register(conn, new_ids, max_registered, now, holes)
        stats.registered += done.registered
        stats.late_arrivals += len(done.late)
        stats.gaps_recorded += done.gaps_recorded
        for i in sorted(done.late):
            log.warning("late arrival: mailbox id %s registered after larger ids", i)


def _is_pg_error(exc: SQLAlchemyError) -> bool:
    """OperationalErrors from psycopg are PostgreSQL's (the pump reconnects); PyMySQL's are the mailbox's."""
    return type(getattr(exc, "orig", None)).__module__.startswith("psycopg")
