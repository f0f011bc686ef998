"""Pipeline liveness through the engine, on the real PostgreSQL and MariaDB (OPS-2): the monitor
reads the mailbox's unregistered rows and the pump's lock and heartbeat, and the check fails when
work waits with no pump alive; an unreachable or hanging mailbox fails the check and never the read
of PostgreSQL. (Killing a real pump process and runs that fail at start: tests/e2e.)"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

import pytest
from sqlalchemy import text

from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.monitor.alerts import Alerter
from msgx_engine.monitor.checks import pipeline_liveness
from msgx_engine.monitor.figures import figures, read_mailbox
from msgx_engine.store import locks, monitoring
from tests.builders import gtdt
from tests.http_support import listening_probe
from tests.pipeline_support import register
from tests.private_servers import free_port


def put_aged(app, n: int, age_s: float) -> list[int]:
    """``n`` rows inserted as the AODB adapter does, stamped ``age_s`` ago (naive local wall time)."""
    stamp = (datetime.now() - timedelta(seconds=age_s)).replace(microsecond=0)
    return [app.mailbox.put(gtdt(f"L{i}", (1, "A1")), received_at=stamp) for i in range(n)]


@contextmanager
def running_pump(app, *, beat_age_s: float = 0.0) -> Iterator[None]:
    """A session that holds the pump's writer lock, with a heartbeat (a loop beat after the start
    beat) ``beat_age_s`` old: what a looping pump leaves in PostgreSQL."""
    with app.engine.connect() as holder:
        assert holder.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": locks.PUMP}).scalar_one()
        holder.commit()
        stamp_beats(app, started_ago_s=beat_age_s + 30, beat_ago_s=beat_age_s)
        try:
            yield
        finally:
            holder.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": locks.PUMP})
            holder.commit()


def stamp_beats(app, *, started_ago_s: float, beat_ago_s: float) -> None:
    with app.engine.begin() as conn:
        monitoring.beat(conn, monitoring.PUMP, pid=1, host="pump-host", started=True)
        conn.execute(text("UPDATE heartbeat SET started_at = now() - make_interval(secs => :s), "
                          "beat_at = now() - make_interval(secs => :b) WHERE component = 'pump'"),
                     {"s": started_ago_s, "b": beat_ago_s})


def test_rows_waiting_and_no_pump_ever_run_fail_the_check(app):
    """The sensor stopped (or the daemon is down) before any pump ran: 50 rows wait 95 s."""
    put_aged(app, 50, 95)
    r = app.check("pipeline_liveness")
    assert not r.passed
    assert r.metadata["mailbox_up"] is True and r.metadata["unregistered_rows"] == 50
    assert 90 <= float(r.metadata["unregistered_oldest_age_s"]) < 150
    assert "50 mailbox row(s) wait to be registered" in r.summary and "no pump has ever run" in r.summary


def test_a_pump_holding_the_lock_and_beating_passes_while_rows_wait(app):
    put_aged(app, 5, 95)
    with running_pump(app, beat_age_s=5):
        r = app.check("pipeline_liveness")
    assert r.passed and r.metadata["pump_alive"] is True and r.metadata["unregistered_rows"] == 5


def test_a_pump_whose_lock_is_gone_and_heartbeat_stale_fails(app):
    """Killed and not relaunched: the lock went with its session, the last beat is 5 minutes old."""
    put_aged(app, 3, 95)
    with running_pump(app, beat_age_s=5):
        assert app.check("pipeline_liveness").passed
    stamp_beats(app, started_ago_s=3600, beat_ago_s=300)
    r = app.check("pipeline_liveness")
    assert not r.passed and "no pump is running (last heartbeat 5 min ago)" in r.summary


def test_registered_work_counts_and_the_mailbox_side_drops_it(app):
    """Once the intake registered the rows they are open messages (PostgreSQL's side), no longer
    unregistered; with no pump alive and the oldest registered long ago, it is still a stall."""
    put_aged(app, 4, 95)
    register(app)
    f = figures(app.engine, app.mailbox)
    assert (f.unregistered_rows, f.open_messages) == (0, 4)
    with app.engine.begin() as conn:
        conn.execute(text("UPDATE proc_state SET created_at = now() - interval '2 minutes'"))
    assert not app.check("pipeline_liveness").passed


def test_mailbox_insert_times_are_read_as_this_hosts_local_time(app, monkeypatch):
    """The mailbox's DATETIME is a naive wall time: with the process in UTC+8 a row stamped 95 s ago
    (local) is 95 s old against PostgreSQL's clock, not eight hours."""
    monkeypatch.setenv("TZ", "Asia/Shanghai")
    time.tzset()
    try:
        put_aged(app, 1, 95)
        f = figures(app.engine, app.mailbox)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert 90 <= f.unregistered_age_s < 150


def test_an_unreachable_mailbox_fails_the_check_and_postgresql_still_reads(app):
    closed = Mailbox(f"mysql+pymysql://root@127.0.0.1:{free_port()}/nowhere")
    try:
        f = figures(app.engine, closed)
    finally:
        closed.dispose()
    assert f.mailbox is not None and f.mailbox.up is False and "OperationalError" in (f.mailbox.error or "")
    assert f.open_messages == 0 and f.now is not None
    r = pipeline_liveness(f, None)
    assert not r.passed and "the mailbox cannot be read" in r.summary
    closed = Mailbox(f"mysql+pymysql://root@127.0.0.1:{free_port()}/nowhere")
    try:
        evaluation = Alerter(app.engine, webhook_url=None, mailbox=closed).evaluate()   # never raises
    finally:
        closed.dispose()
    assert evaluation.changed == ["pipeline_liveness"] and evaluation.failing == ["pipeline_liveness"]


def test_a_hanging_mailbox_costs_the_timeout_and_does_not_pile_up_reads():
    """A server that accepts and never answers: the read gives up after its timeout, and while that
    read is still stuck the next one reports the mailbox down at once."""
    with listening_probe() as (port, _sock):
        hung = Mailbox(f"mysql+pymysql://root@127.0.0.1:{port}/x")
        started = time.monotonic()
        first = read_mailbox(hung, 0, timeout_s=1.0)
        took = time.monotonic() - started
        second_started = time.monotonic()
        second = read_mailbox(hung, 0, timeout_s=1.0)
        assert time.monotonic() - second_started < 0.5
    assert first.up is False and "did not answer within 1 s" in (first.error or "") and took < 3
    assert second.up is False and "has not returned yet" in (second.error or "")


@pytest.mark.parametrize("read_only", [False, True])
def test_rows_marked_by_someone_else_count_only_for_a_shadow(app, read_only):
    """Production counts unmarked rows only; a read-only (shadow) mailbox counts every row above its
    position, whoever marked it (the same rule as the intake's)."""
    ids = put_aged(app, 2, 95)
    app.mailbox.mark_where_null(ids[:1], datetime.now().replace(microsecond=0))
    mailbox = Mailbox(app.settings.mailbox_url or "", read_only=read_only)
    try:
        assert figures(app.engine, mailbox).unregistered_rows == (2 if read_only else 1)
    finally:
        mailbox.dispose()
