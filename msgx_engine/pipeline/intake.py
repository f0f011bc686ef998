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

from sqlalchemy import Connection, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from msgx_engine.clock import Clock
from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.mailbox.tables import cminmsgs
from msgx_engine.store.tables import backfill_todo, intake_gap, intake_state, proc_state

log = logging.getLogger(__name__)

PENDING = "PENDING"
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
        max_registered = self._max_registered(conn)
        open_gaps = self._open_gaps(conn)
        conn.commit()
        try:
            candidates = list(self.mailbox.unprocessed_ids(max_registered, self.batch))
            if open_gaps:   # a gap that commits within its grace is picked up at once
                candidates += self._present_unmarked(open_gaps)
            if force_full or self._due(self._last_full, self.full_scan_every_s, now):
                candidates += self._full_scan(conn)
                self._last_full = now
                self._last_late = now
            elif self._due(self._last_late, self.late_scan_every_s, now):
                low = max(self._low_water(conn, max_registered) - self.late_window, 0)
                candidates += self.mailbox.unprocessed_ids(low, self.batch * 4)
                self._last_late = now
            new_ids = self._unregistered(conn, sorted(set(candidates)))
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

    def _present_unmarked(self, ids: list[int]) -> list[int]:
        with self.mailbox.engine.connect() as mconn:
            return [int(r[0]) for r in mconn.execute(select(cminmsgs.c.CMINMSGS_ID).where(
                cminmsgs.c.CMINMSGS_ID.in_(ids), cminmsgs.c.CMINMSGS_DATE_PROCESSED.is_(None)))]

    @staticmethod
    def _open_gaps(conn: Connection) -> list[int]:
        return [r[0] for r in conn.execute(select(intake_gap.c.msg_id).where(
            intake_gap.c.arrived_at.is_(None), intake_gap.c.passed_at.is_(None))
            .order_by(intake_gap.c.msg_id).limit(1000))]

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
        conn.execute(update(intake_state).where(intake_state.c.name == "cminmsgs")
                     .values(last_full_scan_at=self.clock.now()))
        return found

    @staticmethod
    def _max_registered(conn: Connection) -> int:
        return int(conn.execute(select(func.coalesce(func.max(proc_state.c.msg_id), 0))).scalar_one())

    @staticmethod
    def _low_water(conn: Connection, max_registered: int) -> int:
        """Smallest id not yet terminal and marked; everything below it is finished."""
        open_min = conn.execute(select(func.min(proc_state.c.msg_id))
                                .where(proc_state.c.status.in_(("PENDING", "FAILED")))).scalar()
        todo_min = conn.execute(select(func.min(backfill_todo.c.msg_id))
                                .where(backfill_todo.c.status == "PENDING")).scalar()
        lows = [v for v in (open_min, todo_min) if v is not None]
        return (min(lows) - 1) if lows else max_registered

    @staticmethod
    def _unregistered(conn: Connection, ids: list[int]) -> list[int]:
        if not ids:
            return []
        known = {r[0] for r in conn.execute(select(proc_state.c.msg_id).where(proc_state.c.msg_id.in_(ids)))}
        return [i for i in ids if i not in known]

    def _register(self, conn: Connection, new_ids: list[int], max_registered: int, now: datetime,
                  stats: IntakeStats, holes: list[int]) -> None:
        gaps = conn.execute(select(intake_gap.c.msg_id, intake_gap.c.passed_at)
                            .where(intake_gap.c.msg_id.in_(new_ids), intake_gap.c.arrived_at.is_(None))).fetchall()
        gap_ids = {g.msg_id for g in gaps}
        passed = {g.msg_id for g in gaps if g.passed_at is not None}
        late = {i for i in new_ids if i < max_registered and i not in gap_ids} | passed
        rows = [{"msg_id": i, "status": PENDING, "created_at": now, "updated_at": now,
                 "late_arrival": i in late} for i in new_ids]
        conn.execute(pg_insert(proc_state).on_conflict_do_nothing(index_elements=["msg_id"]), rows)
        stats.registered += len(new_ids)
        stats.late_arrivals += len(late)
        if gaps:
            conn.execute(update(intake_gap).where(intake_gap.c.msg_id.in_(list(gap_ids))).values(arrived_at=now))
        for i in sorted(late):
            log.warning("late arrival: mailbox id %s registered after larger ids", i)
        if holes:
            conn.execute(pg_insert(intake_gap).on_conflict_do_nothing(index_elements=["msg_id"]),
                         [{"msg_id": h, "first_seen_at": now} for h in holes])
            stats.gaps_recorded += len(holes)


def _is_pg_error(exc: SQLAlchemyError) -> bool:
    """OperationalErrors from psycopg are PostgreSQL's (the pump reconnects); PyMySQL's are the mailbox's."""
    return type(getattr(exc, "orig", None)).__module__.startswith("psycopg")
