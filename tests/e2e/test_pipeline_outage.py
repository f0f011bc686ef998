"""Server outages during processing: a private MariaDB stopped while the pump works
(US-09 AC2, INV-16: processing continues, backfill backs off, marks follow after recovery) and a
private PostgreSQL restarted under a running pump subprocess (US-03 AC8, OPS-1: the pump
reconnects, nothing lost or doubled). The shared 3306/5432 servers are never touched."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import replace

import pymysql
import pytest
from sqlalchemy import func, select, text

from msgx_engine.app import App
from msgx_engine.db import make_engine
from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.store import migrate
from msgx_engine.store.tables import backfill_todo, msg_event, proc_state, proc_state_hst
from tests.builders import gtdt
from tests.conftest import MSGX_BIN
from tests.e2e.test_pipeline_crash import fill
from tests.pipeline_support import drain_now, proc, register
from tests.private_servers import PG_BIN, PrivateMariaDB, PrivatePostgres, private_postgres_root, wait_for
from tests.recovery import recovery


@pytest.fixture
def private_mariadb(tmp_path):
    if shutil.which("mariadbd") is None:
        pytest.fail("mariadbd is not installed", pytrace=False)
    db = PrivateMariaDB(tmp_path / "mariadb")
    db.start()
    yield db
    db.stop()


def test_mariadb_stopped_during_processing(settings, clock, private_mariadb):
    """US-09 AC2, INV-16, US-01 AC4: with the mailbox server stopped, registered messages are still
    processed (bodies already read), intake and backfill fail softly with a recorded backoff; after
    the restart every mark is written. Nothing in PostgreSQL is rolled back."""
    with pymysql.connect(host="127.0.0.1", port=private_mariadb.port, user="root", autocommit=True) as c:
        c.cursor().execute("CREATE DATABASE mbx")
    url = f"mysql+pymysql://root@127.0.0.1:{private_mariadb.port}/mbx"
    Mailbox(url).init()
    app = App.from_settings(replace(settings, mailbox_url=url), clock=clock)
    try:
        ids = [app.mailbox.put(gtdt(f"M{i}", (1, f"A{i}"))) for i in range(30)]
        register(app)
        processor = app.processor()
        app.processor = lambda: processor                # the pump below reuses its read-ahead bodies
        with app.engine.connect() as conn:
            from msgx_engine.pipeline.writer import try_lock
            assert try_lock(conn)
            assert processor.step(conn).status == "SUCCEEDED"
        private_mariadb.stop()
        summary = drain_now(app)
        assert summary.source_errors >= 1 and summary.marked == 0
        assert all(proc(app, i).status == "SUCCEEDED" for i in ids)
        with app.engine.connect() as conn:
            todos = conn.execute(select(backfill_todo.c.status, backfill_todo.c.attempts,
                                        backfill_todo.c.last_error)).fetchall()
        assert len(todos) == 30 and all(t.status == "PENDING" and t.attempts >= 1 and t.last_error for t in todos)
        private_mariadb.start()
        back = time.monotonic()
        clock.advance(2)
        summary = drain_now(app)
        assert summary.marked == 30
        recovery("MariaDB stopped during processing", back, "MariaDB started -> every mark written")
        assert all(v is not None for v in app.mailbox.processed_at(ids).values())
    finally:
        app.dispose()


@pytest.fixture
def private_postgres():
    if PG_BIN is None:
        pytest.fail("PostgreSQL server binaries not found under /usr/lib/postgresql", pytrace=False)
    base = private_postgres_root()
    pg = PrivatePostgres(base / "cluster")
    pg.ctl("start")
    yield pg
    pg.ctl("stop")
    shutil.rmtree(base, ignore_errors=True)


def test_postgres_restarted_under_a_running_pump(private_postgres, mysql_dbs, tmp_path):
    """US-03 AC8, OPS-1, INV-20b: PostgreSQL restarts while ``msgx pump --drain`` works through 1,000
    rows; the pump reconnects (re-taking the lock) and finishes: every row terminal exactly once,
    two events per applied message, every mark written."""
    engine = make_engine(private_postgres.url())
    migrate.upgrade(engine)
    mb = mysql_dbs.fresh()
    fill(mb, [gtdt(f"PR{i % 50:02d}", (1, f"G{i}"), seqn=700000 + i) for i in range(1000)])
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSGX_")}
    env.update(MSGX_DB_URL=private_postgres.url(), MSGX_MAILBOX_URL=mb, MSGX_HOME=str(tmp_path))
    runner = subprocess.Popen([MSGX_BIN, "pump", "--drain"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def terminal_count() -> int:
        try:
            with engine.connect() as conn:
                return conn.execute(select(func.count()).select_from(proc_state).where(
                    proc_state.c.status == "SUCCEEDED")).scalar_one()
        except Exception:  # noqa: BLE001 - the server may be restarting
            return 0

    try:
        wait_for(lambda: terminal_count() >= 150, "the pump to be mid-run", timeout=120)
        private_postgres.ctl("restart")
        back = time.monotonic()
        out, err = runner.communicate(timeout=300)
        recovery("PostgreSQL restarted under a running pump", back,
                 "PostgreSQL restarted -> last of 1,000 rows processed")
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == 0, err[-2000:]
    assert "reconnected" in err
    engine.dispose()
    engine = make_engine(private_postgres.url())
    with engine.connect() as conn:
        statuses = conn.execute(select(proc_state.c.status, func.count()).group_by(proc_state.c.status)).fetchall()
        per_msg = conn.execute(text("SELECT count(*) FILTER (WHERE c <> 2) FROM "
                                    "(SELECT msg_id, count(*) c FROM msg_event GROUP BY msg_id) x")).scalar_one()
        n_events = conn.execute(select(func.count()).select_from(msg_event)).scalar_one()
        terminal_twice = conn.execute(text(
            "SELECT count(*) FROM (SELECT msg_id FROM proc_state_hst WHERE status IN ('SUCCEEDED','SKIPPED','DEAD') "
            "GROUP BY msg_id HAVING count(*) > 1) x")).scalar_one()
        hst = conn.execute(select(func.count()).select_from(proc_state_hst)).scalar_one()
    engine.dispose()
    assert dict(statuses) == {"SUCCEEDED": 1000}
    assert per_msg == 0 and n_events == 2000 and terminal_twice == 0 and hst == 1000
    with Mailbox(mb).engine.connect() as conn:
        unmarked = text("SELECT count(*) FROM cminmsgs WHERE CMINMSGS_DATE_PROCESSED IS NULL")
        assert conn.execute(unmarked).scalar_one() == 0
