"""The state database and the mailbox stay consistent: work the mailbox shows as processed is never
lost silently (a restore from an older backup is refused, not ignored), one installation per
mailbox, and a processed mark reset to NULL is written again.

Proves US-01 (intake), C-15 (the mark is ours to write where NULL), OPS-1/PRE-5 (one active
writer), INV-2b (no row registered twice). The restore is simulated by copying the state database
(CREATE DATABASE ... TEMPLATE) mid-run and pointing a new App at the copy; the fault matrix
(tests/e2e/test_fault_matrix.py) does the same with pg_dump/pg_restore on a private server.
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from datetime import datetime

import psycopg
import pytest
from sqlalchemy import func, select, text, update

from msgx_engine.app import App
from msgx_engine.mailbox.lock import MailboxLock
from msgx_engine.mailbox.tables import cminmsgs
from msgx_engine.operations.recover import RecoverBusy, find_lost, recover, register_lost
from msgx_engine.pipeline.intake import Intake, StateBehindMailbox
from msgx_engine.pipeline.pump import PumpBusy
from msgx_engine.pipeline.writer import release_lock, try_lock
from msgx_engine.store import audit
from msgx_engine.store.tables import proc_state, proc_state_hst
from tests.builders import gtdt
from tests.conftest import PG_ADMIN
from tests.pipeline_support import drain_now, gates, is_marked, proc, todo


def _copy_database(pg_dbs, source_url: str) -> str:
    """A "backup" of the state database as it is now (a template copy; no session may be open)."""
    name = source_url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
    return pg_dbs.create(f"{name}_bak", template=name)


def test_restored_state_database_refuses_with_the_gap_named(app, clock, pg_dbs, caplog):
    """A state database restored from an older backup, while the mailbox holds rows processed since,
    refuses to process at start-up, naming the ids and the count (nothing is registered or applied);
    the original database, which knows those rows, is not refused."""
    first = [app.mailbox.put(gtdt(f"R{i}", (1, f"A{i}"))) for i in range(5)]
    drain_now(app)
    app.engine.dispose()
    backup = _copy_database(pg_dbs, app.settings.db_url)
    later = [app.mailbox.put(gtdt(f"R{i}", (1, f"B{i}"))) for i in range(5)]
    drain_now(app)
    assert all(is_marked(app, i) for i in first + later)
    restored = App.from_settings(replace(app.settings, db_url=backup), clock=clock)
    try:
        newest = restored.mailbox.put(gtdt("R0", (1, "C0")))
        with caplog.at_level(logging.ERROR), pytest.raises(StateBehindMailbox) as refused:
            drain_now(restored)
        assert f"5 row(s) with ids {later[0]}..{later[-1]}" in str(refused.value)
        assert "msgx recover" in str(refused.value) and "ALERT" in caplog.text
        with restored.engine.connect() as conn:
            assert conn.execute(select(func.max(proc_state.c.msg_id))).scalar_one() == first[-1]
        assert not is_marked(restored, newest)
        drain_now(app)                       # the live database knows every row: it goes on
        assert proc(app, newest).status == "SUCCEEDED"
    finally:
        restored.dispose()


def test_recover_replays_the_lost_rows_audited_and_the_state_catches_up(app, clock, pg_dbs):
    """``msgx recover``: after a restore, the rows processed since (marked rows above the high-water
    mark and a recorded gap that turned up marked) are registered again ignoring their mark,
    replayed in id order and audited (one operator_audit row, one item each); the restored state
    then equals the state of the database that never lost them, no mark is written twice, and the
    pump goes on. While a pump runs, recovery registers nothing."""
    with app.mailbox.engine.connect() as conn:
        for i in (1, 2, 4):                 # id 3 is a hole: a gap in the backup
            conn.execute(cminmsgs.insert().values(CMINMSGS_ID=i, CMINMSGS_CLOB_MSG=gtdt("RC1", (1, f"G{i}")),
                                                  CMINMSGS_STATUS="VALID"))
    drain_now(app)
    app.engine.dispose()
    backup = _copy_database(pg_dbs, app.settings.db_url)
    with app.mailbox.engine.connect() as conn:
        conn.execute(cminmsgs.insert().values(CMINMSGS_ID=3, CMINMSGS_CLOB_MSG=gtdt("RC2", (1, "LATE")),
                                              CMINMSGS_STATUS="VALID"))
    later = [app.mailbox.put(gtdt("RC1", (1, f"N{i}"))) for i in range(3)]
    clock.advance(10)
    drain_now(app)
    restored = App.from_settings(replace(app.settings, db_url=backup), clock=clock)
    try:
        with restored.engine.connect() as conn:
            lost = find_lost(conn, restored.mailbox)
        assert lost.above == tuple(later) and lost.gaps == (3,)
        with restored.engine.connect() as holder:
            assert try_lock(holder)
            with pytest.raises(RecoverBusy):
                register_lost(restored.engine, restored.mailbox, operator="ops", reason="x", now=clock.now())
            release_lock(holder)
        result = recover(restored.engine, restored.mailbox, operator="ops", reason="restored from Monday's dump",
                         now=clock.now(), replay=lambda: drain_now(restored), rebuild=None)
        assert result.registered == [3, *later]
        assert result.outcome["statuses"] == {"SUCCEEDED": 4}
        assert gates(restored, "RC1") == gates(app, "RC1") == [(1, f"N{len(later) - 1}")]
        assert gates(restored, "RC2") == [(1, "LATE")]
        with restored.engine.connect() as conn:
            entry = audit.entries(conn, action="recover")[0]
            items = audit.items_of(conn, entry.audit_id)
        assert (entry.operator, entry.reason, entry.outcome["registered"]) == ("ops", "restored from Monday's dump", 4)
        assert [(i.msg_id, i.after_status) for i in items] == [(3, "PENDING"), *((m, "PENDING") for m in later)]
        assert {todo(restored, i).status for i in [3, *later]} == {"ALREADY"}     # not marked twice
        newest = restored.mailbox.put(gtdt("RC1", (1, "AFTER")))
        drain_now(restored)
        assert proc(restored, newest).status == "SUCCEEDED"
    finally:
        restored.dispose()


def test_gap_that_turned_up_marked_is_refused(app, clock):
    """A recorded gap whose row arrives already marked (processed by a state this database does
    not remember) is refused like a marked row above the high-water mark."""
    with app.mailbox.engine.connect() as conn:
        conn.execute(cminmsgs.insert().values(CMINMSGS_ID=1, CMINMSGS_CLOB_MSG=gtdt("GP1", (1, "A")),
                                              CMINMSGS_STATUS="VALID"))
        conn.execute(cminmsgs.insert().values(CMINMSGS_ID=3, CMINMSGS_CLOB_MSG=gtdt("GP3", (1, "A")),
                                              CMINMSGS_STATUS="VALID"))
    drain_now(app)
    clock.advance(10)
    drain_now(app)                           # the gap (id 2) expired and was passed
    with app.mailbox.engine.connect() as conn:
        conn.execute(cminmsgs.insert().values(CMINMSGS_ID=2, CMINMSGS_CLOB_MSG=gtdt("GP2", (1, "A")),
                                              CMINMSGS_STATUS="VALID", CMINMSGS_DATE_PROCESSED=func.now()))
    with app.engine.connect() as conn:
        with pytest.raises(StateBehindMailbox, match=r"1 recorded gap\(s\) that turned up marked \(2\)"):
            Intake(app.mailbox, clock).scan(conn, force_full=True)


def test_fresh_installation_adopts_already_marked_history(app):
    """A new installation on a mailbox whose old rows are already marked takes them as processed
    before it (no refusal); the unmarked backlog among them is processed. The marks are months old:
    a mailbox processed recently is refused instead (L12, tests/integration/test_lost_state.py)."""
    with app.mailbox.engine.connect() as conn:
        for i in range(1, 6):
            conn.execute(cminmsgs.insert().values(
                CMINMSGS_ID=i, CMINMSGS_CLOB_MSG=gtdt(f"H{i}", (1, "A")), CMINMSGS_STATUS="VALID",
                CMINMSGS_DATE_PROCESSED=datetime(2025, 6, 1) if i != 3 else None))
    drain_now(app)
    with app.engine.connect() as conn:
        assert [r[0] for r in conn.execute(select(proc_state.c.msg_id))] == [3]
        assert conn.execute(text("SELECT high_water FROM intake_state")).scalar_one() == 5


def test_processed_mark_reset_to_null_is_written_again_once(app, clock, caplog):
    """C-15: an operator resets DATE_PROCESSED to NULL on processed rows: the next scan marks them
    again, logs one WARNING naming them, and the messages stay as they ended (no second terminal
    status, no re-apply)."""
    ids = [app.mailbox.put(gtdt(f"MR{i}", (1, f"A{i}"))) for i in range(3)]
    drain_now(app)
    assert all(todo(app, i).status == "DONE" for i in ids)
    clock.advance(1)
    with app.mailbox.engine.connect() as conn:
        conn.execute(update(cminmsgs).where(cminmsgs.c.CMINMSGS_ID.in_(ids[:2]))
                     .values(CMINMSGS_DATE_PROCESSED=None))
    with caplog.at_level(logging.WARNING, logger="msgx_engine.pipeline.intake"):
        with app.engine.connect() as conn:
            intake = Intake(app.mailbox, clock)
            intake.scan(conn, force_full=True)
            intake.scan(conn, force_full=True)         # still unmarked: no second warning
    resets = [r for r in caplog.records if "reset to NULL" in r.getMessage()]
    assert len(resets) == 1 and resets[0].levelno == logging.WARNING
    assert f"({ids[0]}, {ids[1]})" in resets[0].getMessage()
    assert [todo(app, i).status for i in ids] == ["PENDING", "PENDING", "DONE"]
    clock.advance(1)
    drain_now(app)
    assert all(is_marked(app, i) for i in ids)
    assert [todo(app, i).status for i in ids] == ["DONE", "DONE", "DONE"]
    with app.engine.connect() as conn:
        hst = conn.execute(select(proc_state_hst.c.msg_id, func.count()).group_by(proc_state_hst.c.msg_id)).all()
    assert dict(hst) == dict.fromkeys(ids, 1)
    assert all(proc(app, i).status == "SUCCEEDED" for i in ids)


def test_the_full_scan_rolls_over_the_mailbox_a_slice_per_late_scan_p37(app, clock, caplog):
    """F4, P37: after the first pass's whole scan, the full scan reads one slice of ids per late
    scan, sized so the slices cover the mailbox once every ``full_scan_every_s``; a mark reset on an
    old row is found by the slice that covers it (not by the late window, closed here), and no pass
    reads more than its slice: the pump is never held for a read of the whole mailbox."""
    ids = [app.mailbox.put(gtdt(f"RS{i}", (1, f"A{i}"))) for i in range(12)]
    drain_now(app)
    intake = Intake(app.mailbox, clock, batch=2, late_window=0, late_scan_every_s=2, full_scan_every_s=10)
    read: list[tuple[int, int]] = []
    slice_of = app.mailbox.unprocessed_ids_between

    def spy(after_id: int, upto_id: int) -> list[int]:
        read.append((after_id, upto_id))
        return slice_of(after_id, upto_id)

    app.mailbox.unprocessed_ids_between = spy            # type: ignore[method-assign]
    with app.engine.connect() as conn:
        intake.scan(conn)                                # the first pass: the whole mailbox at once
        assert read == []
        with app.mailbox.engine.connect() as mconn:
            mconn.execute(update(cminmsgs).where(cminmsgs.c.CMINMSGS_ID == ids[7]).values(CMINMSGS_DATE_PROCESSED=None))
        requeued_at = None
        with caplog.at_level(logging.WARNING, logger="msgx_engine.pipeline.intake"):
            for tick in range(1, 6):
                clock.advance(2)
                intake.scan(conn)
                if requeued_at is None and todo(app, ids[7]).status == "PENDING":
                    requeued_at = tick
    step = max(2, -(-ids[-1] // 5))                  # a fifth of the ids (at least a batch) per late scan
    sweep = [(k, k + step) for k in range(0, ids[-1], step)]
    assert read == (sweep + sweep)[:5]               # bottom to top, then again from the bottom
    covering = next(n for n, (after, upto) in enumerate(read, start=1) if after < ids[7] <= upto)
    assert requeued_at == covering
    assert any(f"({ids[7]})" in r.getMessage() for r in caplog.records if "reset to NULL" in r.getMessage())


def test_second_installation_on_the_same_mailbox_exits_naming_the_holder(app, clock, pg_url_2):
    """OPS-1: two installations (each its own PostgreSQL) on one mailbox: while one pump runs, the
    other exits at once with a message naming the mailbox lock and the holding host, and
    registers nothing; once the first is gone, it may run."""
    other = App.from_settings(replace(app.settings, db_url=pg_url_2), clock=clock)
    app.mailbox.put(gtdt("TW1", (1, "A1")))
    holder = MailboxLock(app.settings.mailbox_url or "")
    holder.acquire()
    try:
        with pytest.raises(PumpBusy) as busy:
            drain_now(other)
        text_ = str(busy.value)
        assert "another msgx installation" in text_ and repr(holder.name) in text_
        assert re.search(r"MySQL connection \d+ from host \S+:\d+", text_), text_
        with other.engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(proc_state)).scalar_one() == 0
    finally:
        holder.dispose()
    drain_now(other)
    with other.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(proc_state)).scalar_one() == 1
    other.dispose()


def test_mailbox_lock_on_a_postgresql_mailbox_names_the_holder(pg_dbs):
    """The embedded demo's mailbox is PostgreSQL: the lock is a session advisory lock there, and a
    refusal names the holder's host and pid (its application_name)."""
    url = pg_dbs.fresh(migrated=False)
    first, second = MailboxLock(url), MailboxLock(url)
    first.acquire()
    try:
        with pytest.raises(Exception, match=r"held by msgx pump \S+ pid \d+ \(server pid \d+"):
            second.acquire()
    finally:
        first.dispose()
    second.acquire()
    assert second.held
    second.dispose()


def test_mailbox_lock_is_taken_again_after_the_connection_drops(app):
    """A mailbox restart ends the lock's session (the server frees the lock): the pump's next check
    takes it again on a new connection."""
    lock = MailboxLock(app.settings.mailbox_url or "", monotonic=iter(range(0, 1000, 5)).__next__)
    lock.acquire()
    assert lock.conn is not None
    cid = lock.conn.execute(text("SELECT CONNECTION_ID()")).scalar_one()
    with app.mailbox.engine.connect() as conn:
        conn.execute(text(f"KILL {int(cid)}"))
    lock.keep()
    assert lock.held
    assert lock.conn.execute(text("SELECT IS_USED_LOCK(:n) = CONNECTION_ID()"), {"n": lock.name}).scalar_one() == 1
    lock.dispose()


def test_pump_without_reachable_mailbox_still_starts(app, clock):
    """Decisions P1: the pump is not stopped by an unreachable mailbox at its start; it takes the
    mailbox lock when the server answers."""
    down = replace(app.settings, mailbox_url="mysql+pymysql://root@127.0.0.1:1/nowhere")
    lock = App.from_settings(down, clock=clock).mailbox_lock()
    assert lock is not None
    lock.start()
    assert not lock.held
    lock.dispose()


@pytest.fixture
def pg_url_2(pg_dbs) -> str:
    return pg_dbs.fresh()

