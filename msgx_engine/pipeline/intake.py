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

from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.pipeline.clock import Clock
from msgx_engine.store.tables import backfill_todo, intake_gap, intake_state, proc_state

log = logging.getLogger(__name__)

PENDING = "PENDING"
MAX_GAP_IDS = 10_000


@dataclass
class IntakeStats:
    registered: int = 0
    late_arrivals: int = 0
    gaps_recorded: int = 0


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
        """One intake pass on the writer connection; commits its own transaction."""
        stats = IntakeStats()
        now = self.clock.now()
        max_registered = self._max_registered(conn)
        ids = self.mailbox.unprocessed_ids(max_registered, self.batch)
        candidates = list(ids)
        if force_full or self._due(self._last_full, self.full_scan_every_s, now):
            candidates += self._full_scan(conn)
            self._last_full = now
            self._last_late = now
        elif self._due(self._last_late, self.late_scan_every_s, now):
            low = max(self._low_water(conn, max_registered) - self.late_window, 0)
            candidates += self.mailbox.unprocessed_ids(low, self.batch * 4)
            self._last_late = now
        new_ids = self._unregistered(conn, sorted(set(candidates)))
        if new_ids:
            self._register(conn, new_ids, max_registered, now, stats)
        conn.commit()
        return stats

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
                  stats: IntakeStats) -> None:
        gaps = conn.execute(select(intake_gap.c.msg_id, intake_gap.c.passed_at)
                            .where(intake_gap.c.msg_id.in_(new_ids), intake_gap.c.arrived_at.is_(None))).fetchall()
        passed = {g.msg_id for g in gaps if g.passed_at is not None}
        late = {i for i in new_ids if i < max_registered and i not in {g.msg_id for g in gaps}}
        late |= passed
        rows = [{"msg_id": i, "status": PENDING, "created_at": now, "updated_at": now,
                 "late_arrival": i in late} for i in new_ids]
        conn.execute(pg_insert(proc_state).on_conflict_do_nothing(index_elements=["msg_id"]), rows)
        stats.registered += len(new_ids)
        stats.late_arrivals += len(late)
        if gaps:
            conn.execute(update(intake_gap).where(intake_gap.c.msg_id.in_([g.msg_id for g in gaps]))
                         .values(arrived_at=now))
        for i in sorted(late):
            log.warning("late arrival: mailbox id %s registered after larger ids", i)
        # Holes between the previous top and the new rows: the head waits for them (gap grace).
        top = max_registered
        known = set(new_ids)
        holes: list[int] = []
        for i in sorted(x for x in new_ids if x > max_registered):
            if top and i > top + 1:
                holes.extend(h for h in range(top + 1, i) if h not in known)
            top = i
        if holes:
            if len(holes) > MAX_GAP_IDS:
                log.warning("id jump of %s ids above %s: recording the first %s as gaps", len(holes),
                            max_registered, MAX_GAP_IDS)
                holes = holes[:MAX_GAP_IDS]
            conn.execute(pg_insert(intake_gap).on_conflict_do_nothing(index_elements=["msg_id"]),
                         [{"msg_id": h, "first_seen_at": now} for h in holes])
            stats.gaps_recorded += len(holes)
