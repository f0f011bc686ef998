"""Queue head, retries, dead letters, gaps, the writer lock, backfill and startup refusal.
Time moves only through the ManualClock."""

from __future__ import annotations

import subprocess
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select, text, update
from sqlalchemy.exc import SQLAlchemyError

from msgx_engine.app import App
from msgx_engine.config import ConfigError
from msgx_engine.handlers.decision import Decision, FlightChange, Plan
from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.mailbox.tables import cminmsgs
from msgx_engine.pipeline import plans, routing
from msgx_engine.pipeline.backfill import Backfill, run_backfill
from msgx_engine.pipeline.pump import PumpBusy, PumpOptions
from msgx_engine.pipeline.writer import LockLost, release_lock, try_lock
from msgx_engine.state.model import Set
from msgx_engine.store.tables import backfill_todo, intake_gap
from tests.builders import envelope, gtdt
from tests.conftest import MSGX_BIN
from tests.pipeline_support import (
    drain_now,
    events,
    flight_count,
    gates,
    history,
    is_marked,
    proc,
    register,
    todo,
)


class FailingHook:
    """A post-commit hook (the Redis projection's place) that fails ``times`` times per message."""

    def __init__(self, fail_ids: set[int], times: int) -> None:
        self.fail_ids, self.times = fail_ids, times
        self.seen: dict[int, int] = {}
        self.calls: list[list[int]] = []

    def __call__(self, conn, msg_id, states) -> None:
        self._run([msg_id])

    def _run(self, ids: list[int]) -> None:
        self.calls.append(ids)
        for msg_id in ids:
            if msg_id in self.fail_ids and self.seen.get(msg_id, 0) < self.times:
                self.seen[msg_id] = self.seen.get(msg_id, 0) + 1
                raise ConnectionError("projection unavailable")


class FailingGroupHook(FailingHook):
    """... that also takes a committed group at once (``many``, as the projection does, P16): the
    call fails when one of the group's messages is to fail."""

    def many(self, conn, group) -> None:
        self._run([msg_id for msg_id, _ in group])


def failing_hook(fail_ids: set[int], times: int) -> FailingHook:
    return FailingHook(fail_ids, times)


@pytest.mark.parametrize(("grouped", "hook_kind"), [(False, FailingHook), (True, FailingHook),
                                                    (True, FailingGroupHook)],
                         ids=["alone", "group", "group, one hook call per group"])
def test_retry_with_backoff_keeps_fifo_and_does_not_reapply(app, clock, grouped, hook_kind):
    """US-03 AC1, INV-3, INV-17b, INV-20b, D22: a failed post-commit step leaves the message FAILED
    (PROJECTION, no attempt used, error on its own record, next look +1 s) with state applied once
    and events not yet releasable; the next id waits behind it (not terminal, events unreleased,
    not marked; applied only when its transaction 1 was committed in the same group, P12); the
    retry runs only the remaining steps, for both. A hook that takes the whole group (P16) fails
    for the group: its first message waits, the rest stay applied and open behind it."""
    a = app.mailbox.put(gtdt("R1", (1, "A1")))
    b = app.mailbox.put(gtdt("R2", (1, "B1")))
    hook = hook_kind({a}, 1)
    app.post_commit.append(hook)
    app.pump(PumpOptions(exit_when_waiting=True, idle_poll_s=0.01, group_messages=64 if grouped else 1)).run()
    row = proc(app, a)
    assert (row.status, row.attempts, row.error_class) == ("FAILED", 0, "PROJECTION")
    assert "projection unavailable" in row.error_detail
    assert row.next_attempt_at == clock.now() + timedelta(seconds=1) and row.applied_at is not None
    assert [e.released_at for e in events(app, a)] == [None, None]
    assert proc(app, b).status == "PENDING" and gates(app, "R2") == ([(1, "B1")] if grouped else [])
    assert [e.released_at for e in events(app, b)] == ([None, None] if grouped else [])
    assert todo(app, a) is None and not is_marked(app, a) and not is_marked(app, b)
    clock.advance(0.5)
    drain_now(app)
    assert proc(app, a).status == "FAILED" and proc(app, b).status == "PENDING"
    clock.advance(0.5)
    drain_now(app)
    assert proc(app, a).status == "SUCCEEDED" and proc(app, b).status == "SUCCEEDED"
    ev = events(app, a)
    assert len(ev) == 2 and all(e.released_at is not None for e in ev)
    assert ev[0].state_version == 1 and is_marked(app, a)
    assert history(app, a) == [("FAILED", None, "PROJECTION", 0), ("SUCCEEDED", None, None, None)]
    assert [e.state_version for e in events(app, b)] == [1, 1] and gates(app, "R2") == [(1, "B1")]
    if hook_kind is FailingGroupHook:
        assert hook.calls[0] == [a, b], hook.calls     # the group, at once
    else:
        assert hook.calls[:2] == [[a], [a]], hook.calls


class _Boom(Plan):
    """A transaction-1 plan whose writer fails after the flight state was written."""


def _write_boom(conn, plan, msg_id, now):
    raise SQLAlchemyError("plan writer failed")


def _boom_route(monkeypatch):
    def load(conn, msg, msg_id):
        return None

    def decide(msg, ctx):
        return Decision.apply(FlightChange("BOOM1", (Set("STND", "101"),)), plans=(_Boom(),))

    monkeypatch.setitem(routing.ROUTES, ("BOOM", "*"), routing.Route(load, decide))
    monkeypatch.setitem(plans.WRITERS, _Boom, _write_boom)


def test_transaction_1_failure_rolls_back_then_dead_exhausted(app, clock, monkeypatch):
    """US-03 AC4/AC6, INV-6: a transaction-1 failure rolls back everything (no flight, no events, no
    applied_at); backoff 1, 2, 4, 8 s; the 5th attempt makes it DEAD(exhausted), marked."""
    _boom_route(monkeypatch)
    m = app.mailbox.put(envelope("BOOM", "NONE", "<BOOM/>\n"))
    delays = []
    for attempt in range(1, 5):
        drain_now(app)
        row = proc(app, m)
        assert (row.status, row.attempts, row.error_class, row.applied_at) == ("FAILED", attempt, "INFRA", None)
        assert flight_count(app) == 0 and events(app, m) == [] and todo(app, m) is None
        delays.append((row.next_attempt_at - clock.now()).total_seconds())
        clock.advance(delays[-1])
    assert delays == [1, 2, 4, 8]
    drain_now(app)
    row = proc(app, m)
    assert (row.status, row.reason, row.attempts) == ("DEAD", "exhausted", 5)
    assert flight_count(app) == 0 and is_marked(app, m)


def test_head_deadline_from_stable_created_at(app, clock, monkeypatch):
    """US-03 AC5, decisions P2: the 10-minute head deadline counts from created_at (stable across
    retries); a message already past it gets one retry, then DEAD(exhausted)."""
    _boom_route(monkeypatch)
    m = app.mailbox.put(envelope("BOOM", "NONE", "<BOOM/>\n"))
    register(app)
    created = proc(app, m).created_at
    clock.advance(601)
    drain_now(app)
    assert (proc(app, m).status, proc(app, m).attempts) == ("FAILED", 1)
    clock.advance(1)
    drain_now(app)
    row = proc(app, m)
    assert (row.status, row.reason, row.attempts, row.created_at) == ("DEAD", "exhausted", 2, created)




def _put_at(app, msg_id: int, body: str) -> None:
    """Insert with an explicit id: models a row whose insert committed late (US-01 AC5)."""
    with app.mailbox.engine.connect() as conn:
        conn.execute(cminmsgs.insert().values(CMINMSGS_ID=msg_id, CMINMSGS_CLOB_MSG=body, CMINMSGS_STATUS="VALID"))


def _gap(app, msg_id):
    with app.engine.connect() as conn:
        return conn.execute(select(intake_gap).where(intake_gap.c.msg_id == msg_id)).first()


def test_gap_filled_within_grace_is_processed_in_order(app, clock):
    """US-01 AC5, Q2 (commit order: smaller id commits within the grace): the head holds at 3 while
    id 2 is missing; 2 shows up, is processed first and is not a late arrival."""
    _put_at(app, 1, gtdt("G1", (1, "A1")))
    _put_at(app, 3, gtdt("G3", (1, "C1")))
    drain_now(app)
    assert proc(app, 1).status == "SUCCEEDED" and proc(app, 3).status == "PENDING"
    assert _gap(app, 2).passed_at is None
    clock.advance(4)
    _put_at(app, 2, gtdt("G2", (1, "B1")))
    drain_now(app)
    assert [proc(app, i).status for i in (1, 2, 3)] == ["SUCCEEDED"] * 3
    with app.engine.connect() as conn:
        order = [r[0] for r in conn.execute(text("SELECT msg_id FROM proc_state_hst ORDER BY id"))]
    assert order == [1, 2, 3]
    assert proc(app, 2).late_arrival is False and _gap(app, 2).arrived_at is not None


def test_gap_expired_is_passed_and_late_row_still_processed(app, clock):
    """US-01 AC5, Q2 (commit order: smaller id commits after the grace): after gap_grace_s the gap is
    recorded as passed and 3 is processed; 2 arriving later is registered as late_arrival and processed."""
    _put_at(app, 1, gtdt("G1", (1, "A1")))
    _put_at(app, 3, gtdt("G3", (1, "C1")))
    drain_now(app)
    clock.advance(4.9)
    drain_now(app)
    assert proc(app, 3).status == "PENDING"
    clock.advance(0.2)
    drain_now(app)
    assert proc(app, 3).status == "SUCCEEDED" and _gap(app, 2).passed_at is not None
    _put_at(app, 2, gtdt("G2", (1, "B1")))
    summary = drain_now(app)
    assert summary.late_arrivals == 1
    assert (proc(app, 2).status, proc(app, 2).late_arrival) == ("SUCCEEDED", True)
    assert gates(app, "G2") == [(1, "B1")] and is_marked(app, 2)


def test_marked_row_in_the_id_sequence_is_not_a_gap(app, clock):
    """US-01: a row already marked processed (not ours to take) is no gap: the head does not wait."""
    _put_at(app, 1, gtdt("G1", (1, "A1")))
    _put_at(app, 2, gtdt("G2", (1, "B1")))
    _put_at(app, 3, gtdt("G3", (1, "C1")))
    with app.mailbox.engine.connect() as conn:
        conn.execute(update(cminmsgs).where(cminmsgs.c.CMINMSGS_ID == 2).values(
            CMINMSGS_DATE_PROCESSED=datetime(2020, 1, 1)))
    drain_now(app)
    assert proc(app, 3).status == "SUCCEEDED" and _gap(app, 2) is None


def test_second_pump_is_refused(app):
    """OPS-1, PRE-5: while one pump holds the writer lock, another exits at once with a clear message."""
    with app.engine.connect() as holder:
        assert try_lock(holder)
        with pytest.raises(PumpBusy, match="another msgx pump holds the writer lock"):
            app.pump(PumpOptions()).run()


def test_lost_lock_refuses_the_guarded_writes(app):
    """OPS-1: writes are guarded on the lock's session: without the lock, transaction 1 changes
    nothing and raises LockLost; the message stays open with no attempt used."""
    m = app.mailbox.put(gtdt("L1", (1, "A1")))
    register(app)
    processor = app.processor()
    with app.engine.connect() as conn:
        assert try_lock(conn)
        release_lock(conn)
        with pytest.raises(LockLost):
            processor.step(conn)
    row = proc(app, m)
    assert (row.status, row.attempts, row.applied_at) == ("PENDING", 0, None)
    assert flight_count(app) == 0 and events(app, m) == []


def test_lock_lost_after_transaction_1_is_finished_by_the_next_writer(app):
    """OPS-1, INV-20b: the lock is lost between transactions 1 and 2: the terminal write is refused;
    the next holder finishes the message without applying it again."""
    m = app.mailbox.put(gtdt("L2", (1, "A1")))
    register(app)

    def drop_lock(conn, msg_id, states):
        release_lock(conn)

    app.post_commit.append(drop_lock)
    processor = app.processor()
    with app.engine.connect() as conn:
        assert try_lock(conn)
        with pytest.raises(LockLost):
            processor.step(conn)
    assert proc(app, m).status == "PENDING" and proc(app, m).applied_at is not None
    app.post_commit.clear()
    drain_now(app)
    assert proc(app, m).status == "SUCCEEDED" and len(events(app, m)) == 2 and gates(app, "L2") == [(1, "A1")]


def test_pump_reconnects_when_its_session_is_killed(app, pg_dbs):
    """OPS-1, US-03 AC8: the pump's PostgreSQL session is terminated mid-message: the pump reconnects,
    re-takes the lock and finishes; no attempt is used, nothing applied twice."""
    m = app.mailbox.put(gtdt("K1", (1, "A1")))
    n = app.mailbox.put(gtdt("K2", (1, "B1")))
    killed = []

    def kill_own_session(conn, msg_id, states):
        if not killed:
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
            with app.engine.connect() as other:
                other.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
            killed.append(pid)

    app.post_commit.append(kill_own_session)
    summary = drain_now(app)
    assert summary.reconnects == 1
    for i in (m, n):
        assert (proc(app, i).status, proc(app, i).attempts) == ("SUCCEEDED", 0)
        assert len(events(app, i)) == 2


def test_backfill_only_where_null_backs_off_and_records_missing(app, clock):
    """US-09 AC2/AC3, C-15, INV-7: an unreachable mailbox backs the todo off (1 s, then 2 s) without
    touching processing; a row someone else marked keeps its value (ALREADY); a vanished row is
    recorded FAILED; the rest is marked DONE."""
    a = app.mailbox.put(gtdt("B1", (1, "A1")))
    b = app.mailbox.put(gtdt("B2", (1, "B1")))
    c = app.mailbox.put(gtdt("B3", (1, "C1")))
    app.pump(PumpOptions(exit_when_waiting=True, inline_backfill=False)).run()
    assert all(todo(app, i).status == "PENDING" for i in (a, b, c))
    down = Backfill(Mailbox("mysql+pymysql://root@127.0.0.1:1/nowhere"), clock)
    with app.engine.connect() as conn:
        assert down.run_once(conn).failed_attempts == 3
        assert down.run_once(conn).failed_attempts == 0          # not due yet
        clock.advance(1)
        assert down.run_once(conn).failed_attempts == 3
    t = todo(app, a)
    assert (t.status, t.attempts, t.next_attempt_at) == ("PENDING", 2, clock.now() + timedelta(seconds=2))
    assert "OperationalError" in t.last_error
    earlier = datetime(2020, 5, 5, 5, 5, 5)
    with app.mailbox.engine.connect() as conn:
        conn.execute(update(cminmsgs).where(cminmsgs.c.CMINMSGS_ID == b).values(CMINMSGS_DATE_PROCESSED=earlier))
        conn.execute(cminmsgs.delete().where(cminmsgs.c.CMINMSGS_ID == c))
    clock.advance(2)
    stats = run_backfill(app.engine, app.mailbox, app.clock, max_seconds=30)
    assert (stats.marked, stats.already, stats.missing, stats.pending) == (1, 1, 1, 0)
    assert [todo(app, i).status for i in (a, b, c)] == ["DONE", "ALREADY", "FAILED"]
    assert app.mailbox.processed_at([b])[b] == earlier and is_marked(app, a)


def test_backfill_todo_only_for_terminal(app, clock):
    """US-09 AC3, INV-8: FAILED (non-terminal) has no todo and no mark."""
    app.post_commit.append(failing_hook({1}, 99))
    m = app.mailbox.put(gtdt("B9", (1, "A1")))
    drain_now(app)
    with app.engine.connect() as conn:
        assert conn.execute(select(backfill_todo)).fetchall() == []
    assert proc(app, m).status == "FAILED" and not is_marked(app, m)


def test_startup_refusal(settings, clock, pg_dbs, mysql_dbs, env_for):
    """OPS-1: missing migrations or a mailbox without its tables stop the pump with a clear message."""
    from dataclasses import replace

    bare_mailbox = replace(settings, mailbox_url=mysql_dbs.fresh(with_tables=False))
    app = App.from_settings(bare_mailbox, clock=clock)
    with pytest.raises(ConfigError, match="lacks table"):
        app.check_ready()
    app.dispose()
    unmigrated = replace(settings, db_url=pg_dbs.fresh(migrated=False))
    app = App.from_settings(unmigrated, clock=clock)
    with pytest.raises(ConfigError, match="msgx db upgrade"):
        app.check_ready()
    app.dispose()
    proc_ = subprocess.run([MSGX_BIN, "pump", "--drain"], capture_output=True, text=True,
                           env=env_for(MSGX_MAILBOX_URL=bare_mailbox.mailbox_url or ""), timeout=120)
    assert proc_.returncode != 0 and "lacks table" in proc_.stderr
