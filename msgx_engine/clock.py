"""Time for every pipeline decision comes from one injected clock (tests move it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol

from sqlalchemy import Engine, text


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class DatabaseClock:
    """PostgreSQL's clock: the one that stamps ``created_at``, so grace and deadline agree with it."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._offset: timedelta | None = None

    def now(self) -> datetime:
        if self._offset is None:
            with self.engine.connect() as conn:
                db_now = conn.execute(text("SELECT clock_timestamp()")).scalar_one()
            self._offset = db_now - datetime.now(UTC)
        return datetime.now(UTC) + self._offset


class ManualClock:
    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)
