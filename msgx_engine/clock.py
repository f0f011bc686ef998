"""Time for every pipeline decision comes from one injected clock (tests move it).

Production uses ``DatabaseClock``: PostgreSQL's time, carried forward between readings by the
host's monotonic clock. The host's wall clock is never consulted, so a step of it (an NTP jump,
an operator's ``date -s``, a VM resume) neither stalls the queue behind backoffs and gap graces
stamped before the step nor expires them early.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    """The host's wall clock: for tests that need real time and nothing that waits on it."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class DatabaseClock:
    """PostgreSQL's clock (the one that stamps ``created_at``), so grace and deadline agree with it.

    One reading of ``clock_timestamp()`` anchors the clock; ``now()`` is that reading plus the
    monotonic time elapsed since. The anchor is refreshed every ``resync_s`` (PostgreSQL stays the
    authority over a long-lived process); if the database cannot be read then, the clock keeps
    counting from its last anchor rather than failing the caller.
    """

    def __init__(self, engine: Engine, *, resync_s: float = 300.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.engine = engine
        self.resync_s = resync_s
        self._monotonic = monotonic
        self._anchor: datetime | None = None
        self._anchor_mono = 0.0

    def now(self) -> datetime:
        mono = self._monotonic()
        if self._anchor is None or mono - self._anchor_mono >= self.resync_s:
            try:
                return self._resync()
            except SQLAlchemyError:
                if self._anchor is None:
                    raise
        assert self._anchor is not None
        return self._anchor + timedelta(seconds=mono - self._anchor_mono)

    def _resync(self) -> datetime:
        with self.engine.connect() as conn:
            db_now = conn.execute(text("SELECT clock_timestamp()")).scalar_one()
        self._anchor, self._anchor_mono = db_now, self._monotonic()
        return db_now


def repeat_for(run_for_s: float, every_s: float, round_: Callable[[], None], *,
               sleep: Callable[[float], None] = time.sleep,
               monotonic: Callable[[], float] = time.monotonic) -> int:
    """Call ``round_`` now and then after each pause of ``every_s`` until ``run_for_s`` has
    passed (0: once), the last call at the deadline; the number of calls. The looping scheduled
    runs are built on it (request tracking, the health checks: a run start costs seconds of CPU,
    so a run repeats its work instead of the schedule starting a run for each round, P18, looping runs)."""
    deadline = monotonic() + run_for_s
    calls = 0
    while True:
        round_()
        calls += 1
        left = deadline - monotonic()
        if left <= 0:
            return calls
        sleep(min(every_s, left))


def local_wall_time(instant: datetime) -> datetime:
    """``instant`` as the naive local date-time the mailbox's DATETIME columns hold (seconds)."""
    return instant.astimezone().replace(tzinfo=None, microsecond=0)


class ManualClock:
    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)
