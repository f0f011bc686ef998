"""Every wait and grace runs on PostgreSQL's clock carried by a monotonic clock, never the host's wall
clock (US-03 AC4/AC5 backoff and deadline, US-01 AC5 gap grace): a step of the host clock can
neither stall the queue nor expire a grace early. The whole pump under a stepped host clock
(libfaketime) is a row of the fault matrix (tests/e2e/test_fault_matrix.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from msgx_engine import clock as clock_module
from msgx_engine.clock import DatabaseClock, local_wall_time
from msgx_engine.db import make_engine
from tests.builders import gtdt
from tests.pipeline_support import drain_now


class _NoWallClock:
    """Stands in for ``datetime`` in the clock module: any wall-clock reading fails the test."""

    @staticmethod
    def now(tz=None):
        raise AssertionError("the host's wall clock was read")


class _Monotonic:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_database_clock_reads_postgres_once_then_counts_monotonic_time(pg_url, monkeypatch):
    """The clock is PostgreSQL's reading plus monotonic elapsed time; the wall clock is never read."""
    monkeypatch.setattr(clock_module, "datetime", _NoWallClock)
    engine = make_engine(pg_url)
    mono = _Monotonic()
    clk = DatabaseClock(engine, resync_s=60, monotonic=mono)
    try:
        start = clk.now()
        with engine.connect() as conn:
            db_now = conn.execute(text("SELECT clock_timestamp()")).scalar_one()
        assert timedelta(0) <= db_now - start < timedelta(seconds=30)     # it is PostgreSQL's time
        mono.t += 7.5
        assert clk.now() - start == timedelta(seconds=7.5)
    finally:
        engine.dispose()


def test_database_clock_keeps_counting_when_postgres_is_unreachable_at_resync(pg_url):
    """A resync that cannot reach PostgreSQL does not fail the caller: the clock goes on from its
    anchor (the pump is reconnecting meanwhile)."""
    engine = make_engine(pg_url)
    mono = _Monotonic()
    clk = DatabaseClock(engine, resync_s=10, monotonic=mono)
    start = clk.now()
    engine.dispose()
    clk.engine = make_engine("postgresql+psycopg://postgres@127.0.0.1:1/none")
    mono.t += 11
    assert clk.now() - start == timedelta(seconds=11)
    with pytest.raises(OperationalError):
        DatabaseClock(clk.engine).now()          # without any anchor it cannot invent a time
    clk.engine.dispose()


def test_backfill_mark_comes_from_the_injected_clock(app, clock):
    """C-15: the DATE_PROCESSED msgx writes is the injected clock's time as the mailbox's local
    wall time, not the host's clock."""
    clock.advance(3 * 86400 + 17)
    msg_id = app.mailbox.put(gtdt("CK1", (1, "A1")))
    drain_now(app)
    assert app.mailbox.processed_at([msg_id])[msg_id] == local_wall_time(clock.now())
