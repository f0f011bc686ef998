"""Losing the write right stops writing (OPS-1, PRE-5).

The restart test runs two supervised ``msgx pump`` processes (not ``--drain``: long-lived) on a
private PostgreSQL and a throwaway mailbox database fed a stream of rows, and restarts PostgreSQL
under them twice (a fast shutdown, then a kill -9 of the postmaster). A second pump started while
the first holds the writer lock exits at once (exit 3, "another msgx pump holds the writer
lock"), so "waiting" is a supervisor restarting it in a loop, as systemd (Restart=always) or the
Dagster sensor would; the first pump is supervised the same way.

Who wrote what is witnessed by the servers themselves, not by the pumps: a trigger on every table
the pump writes records, for each row written, the writing backend, its ``application_name`` (the
pump process), the postmaster's start time and whether that backend held the pump's advisory lock
at that instant; a trigger on the mailbox records every processed mark written. The test then
asserts that no row was written by a session without the lock, that the writing sessions never
overlap, that no message ended twice, that nothing was lost and that each mark was written once.

The second test shows the guard under the first: the writer's connection, silently reopened by
SQLAlchemy after its session died, holds no lock and every guarded write on it is refused.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from dataclasses import dataclass, field

import pymysql
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from msgx_engine.db import is_disconnect, make_engine
from msgx_engine.pipeline.writer import LockLost, holds_lock, try_lock, writer_pid
from msgx_engine.store import locks, migrate
from tests.builders import gtdt
from tests.conftest import MSGX_BIN
from tests.e2e.test_pipeline_outage import private_postgres  # noqa: F401 - the private server fixture
from tests.pipeline_support import proc, register
from tests.private_servers import wait_for
from tests.recovery import recovery

N = 1500                      # mailbox rows fed while the pumps run (about 7 s)
STEP = 300                    # terminal messages between one disruption and the next
BUSY = "another msgx pump holds the writer lock"

# --- the witnesses ------------------------------------------------------------------------------
# The pump's bigint advisory key as pg_locks shows it: high half in classid, low half in objid.
_HELD = (f"EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid() "
         f"AND classid = {locks.PUMP >> 32} AND objid = {locks.PUMP & 0xFFFFFFFF} AND objsubid = 1)")
_PG_WITNESS = f"""
CREATE SCHEMA witness;
CREATE TABLE witness.write (id bigserial PRIMARY KEY, tbl text, op text, key text, status text, pid int,
    app text, pm_start timestamptz, held boolean, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE FUNCTION witness.note() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO witness.write (tbl, op, key, status, pid, app, pm_start, held)
    VALUES (TG_TABLE_NAME, TG_OP, to_jsonb(NEW) ->> TG_ARGV[0], to_jsonb(NEW) ->> 'status', pg_backend_pid(),
            current_setting('application_name'), pg_postmaster_start_time(), {_HELD});
    RETURN NULL;
END $$;
"""
# every table the pump writes on its locked connection, with the column that names the row
_WITNESSED = {"proc_state": "msg_id", "proc_state_hst": "msg_id", "msg_event": "msg_id", "flight_schd": "flid",
              "backfill_todo": "msg_id", "msg_identity": "msg_id", "intake_state": "name", "intake_gap": "msg_id"}
_MARK_WITNESS = (
    "CREATE TRIGGER mark_witness BEFORE UPDATE ON cminmsgs FOR EACH ROW "
    "IF NOT (OLD.CMINMSGS_DATE_PROCESSED <=> NEW.CMINMSGS_DATE_PROCESSED) THEN "
    "INSERT INTO mark_witness (msg_id, overwrite) VALUES (NEW.CMINMSGS_ID, OLD.CMINMSGS_DATE_PROCESSED IS NOT NULL); "
    "END IF")


def witness_writes(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(_PG_WITNESS)
        for table, key in _WITNESSED.items():
            conn.exec_driver_sql(f"CREATE TRIGGER witness AFTER INSERT OR UPDATE ON {table} FOR EACH ROW "
                                 f"EXECUTE FUNCTION witness.note('{key}')")


def mysql_connect(mailbox_url: str) -> pymysql.Connection:
    u = make_url(mailbox_url)
    return pymysql.connect(host=u.host, port=u.port or 3306, user=u.username, password=u.password or "",
                           database=u.database, autocommit=True)


def witness_marks(mailbox_url: str) -> None:
    with mysql_connect(mailbox_url) as c, c.cursor() as cur:
        cur.execute("CREATE TABLE mark_witness (id BIGINT AUTO_INCREMENT PRIMARY KEY, msg_id BIGINT NOT NULL, "
                    "overwrite BOOLEAN NOT NULL)")
        cur.execute(_MARK_WITNESS)


# --- the stream and the supervisors ---------------------------------------------------------------
def feed(mailbox_url: str, stop: threading.Event) -> None:
    """N rows, 10 every 50 ms, on one connection (ids commit in order) over 40 flights."""
    with mysql_connect(mailbox_url) as c, c.cursor() as cur:
        for start in range(0, N, 10):
            if stop.is_set():
                return
            cur.executemany("INSERT INTO cminmsgs (CMINMSGS_CLOB_MSG, CMINMSGS_STATUS) VALUES (%s, 'VALID')",
                            [gtdt(f"WR{i % 40:02d}", (1, f"G{i}"), seqn=810000 + i) for i in range(start, start + 10)])
            time.sleep(0.05)


@dataclass
class Run:
    app: str
    returncode: int | None = None
    stderr: str = ""
    killed: bool = False


@dataclass
class Supervisor:
    """Restarts ``msgx pump`` whenever it exits, one second later (systemd's Restart=always,
    RestartSec=1), until stopped. Each run announces itself to PostgreSQL as ``<name>-<n>``."""

    name: str
    env: dict[str, str]
    runs: list[Run] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)
    current: subprocess.Popen | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stopping.is_set():
            run = Run(f"{self.name}-{len(self.runs) + 1}")
            self.runs.append(run)
            self.current = subprocess.Popen([MSGX_BIN, "pump", "--idle-for", "600"],
                                            env={**self.env, "PGAPPNAME": run.app}, text=True,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            run.stderr = self.current.communicate()[1]
            run.returncode = self.current.returncode
            self.stopping.wait(1.0)

    def stop(self) -> None:
        self.stopping.set()
        proc_ = self.current
        if proc_ is not None and proc_.poll() is None:
            proc_.terminate()
        self.thread.join(30)

    def kill_current(self) -> None:
        """kill -9 of the running pump (its sessions end with it); the supervisor restarts it."""
        assert self.current is not None
        self.runs[-1].killed = True
        self.current.kill()

    def busy_exits(self) -> list[Run]:
        return [r for r in self.runs if r.returncode == 3 and BUSY in r.stderr]


def expected_end(run: Run) -> bool:
    """Refused (3: another pump holds the writer lock, or the mailbox lock while it reconnects),
    still running, killed or stopped by the test (SIGTERM), or started while PostgreSQL was down (2:
    the start-up check refuses an unreachable state database). Never a crash (1)."""
    refused = BUSY in run.stderr or "the mailbox is already being processed" in run.stderr
    return (run.returncode in (None, 0, -15) or run.killed or (run.returncode == 3 and refused)
            or (run.returncode == 2 and "state database unreachable" in run.stderr))


def holder(engine: Engine) -> str | None:
    """The application_name of the session holding the pump's writer lock, if any."""
    try:
        with engine.connect() as conn:
            return conn.execute(text(
                "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                f"WHERE l.locktype = 'advisory' AND l.granted AND l.classid = {locks.PUMP >> 32} "
                f"AND l.objid = {locks.PUMP & 0xFFFFFFFF} AND l.objsubid = 1")).scalar()
    except Exception:  # noqa: BLE001 - the server may be restarting
        return None


def terminal_count(engine: Engine) -> int:
    try:
        with engine.connect() as conn:
            return conn.execute(text("SELECT count(*) FROM proc_state WHERE terminal_at IS NOT NULL")).scalar_one()
    except Exception:  # noqa: BLE001 - the server may be restarting
        return -1


def marked_count(mailbox_url: str) -> int:
    with mysql_connect(mailbox_url) as c, c.cursor() as cur:
        cur.execute("SELECT count(*) FROM cminmsgs WHERE CMINMSGS_DATE_PROCESSED IS NOT NULL")
        return cur.fetchone()[0]


def restart_when(engine: Engine, at_least: int, restart) -> int:
    wait_for(lambda: terminal_count(engine) >= at_least, f"{at_least} messages terminal", timeout=180)
    done = terminal_count(engine)
    restart()
    return done


# --- the tests ---------------------------------------------------------------------------------------
def test_restarted_postgres_never_lets_two_pumps_write(private_postgres, mysql_dbs, tmp_path):  # noqa: F811
    """OPS-1, PRE-5, US-03 AC8, INV-20b, C-15: PostgreSQL restarted twice (fast, then killed) under a
    running pump and a second one restarted in a loop by its supervisor while rows keep arriving,
    then the pump holding the lock killed so that another takes over:
    every row written by a session that held the writer lock at that instant, the writing sessions
    one after another (never two at once), every message terminal exactly once with its two events,
    every mark written exactly once."""
    engine = make_engine(private_postgres.url())
    migrate.upgrade(engine)
    witness_writes(engine)
    mb = mysql_dbs.fresh()
    witness_marks(mb)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSGX_")}
    env.update(MSGX_DB_URL=private_postgres.url(), MSGX_MAILBOX_URL=mb, MSGX_HOME=str(tmp_path))
    first, second = Supervisor("A", env), Supervisor("B", env)
    stop_feed = threading.Event()
    feeder = threading.Thread(target=feed, args=(mb, stop_feed), daemon=True)
    try:
        first.start()
        wait_for(lambda: holder(engine) == "A-1", "the first pump to hold the writer lock", timeout=60)
        second.start()
        wait_for(lambda: bool(second.busy_exits()), "the second pump to be refused", timeout=60)
        feeder.start()
        done = restart_when(engine, STEP, lambda: private_postgres.ctl("restart"))

        def kill_and_start() -> None:
            private_postgres.kill()
            private_postgres.ctl("start")

        done = restart_when(engine, done + STEP, kill_and_start)
        restart_when(engine, done + STEP, first.kill_current)    # the holder dies: another pump takes over
        killed_at = time.monotonic()
        killed = first.runs[-1].app
        wait_for(lambda: holder(engine) not in (None, killed), "another pump to take over", timeout=60)
        recovery("the writer-lock holder killed after two PostgreSQL restarts", killed_at,
                 "the kill -> another pump holds the writer lock")
        feeder.join(120)
        wait_for(lambda: terminal_count(engine) == N and marked_count(mb) == N,
                 "every row terminal and marked", timeout=240)
    finally:
        stop_feed.set()
        first.stop()
        second.stop()
    engine.dispose()
    engine = make_engine(private_postgres.url())
    with engine.connect() as conn:
        unheld = conn.execute(text("SELECT tbl, op, key, app, at FROM witness.write WHERE NOT held "
                                   "ORDER BY id LIMIT 10")).fetchall()
        sessions = conn.execute(text(
            "SELECT app, pm_start, pid, min(at) AS first, max(at) AS last, count(*) AS n FROM witness.write "
            "GROUP BY app, pm_start, pid ORDER BY first")).fetchall()
        statuses: dict[str, int] = dict(conn.execute(text(
            "SELECT status, count(*) FROM proc_state GROUP BY status")).all())
        ended_twice = conn.execute(text(
            "SELECT count(*) FROM (SELECT msg_id FROM proc_state_hst GROUP BY msg_id HAVING count(*) <> 1) x")
        ).scalar_one()
        odd_events = conn.execute(text(
            "SELECT count(*) FROM (SELECT p.msg_id FROM proc_state p LEFT JOIN msg_event e USING (msg_id) "
            "GROUP BY p.msg_id HAVING count(e.event_id) <> 2) x")).scalar_one()
        last_writer = conn.execute(text(
            "SELECT count(*) FROM flight_schd f WHERE f.last_message_id IS DISTINCT FROM "
            "(SELECT max(e.msg_id) FROM msg_event e WHERE e.flid = f.flid)")).scalar_one()
    engine.dispose()
    with mysql_connect(mb) as c, c.cursor() as cur:
        cur.execute("SELECT count(*), count(DISTINCT msg_id), coalesce(sum(overwrite), 0) FROM mark_witness")
        marks, marked_rows, overwrites = cur.fetchone()
    report = "\n".join(f"{s.app} pm {s.pm_start:%H:%M:%S} pid {s.pid}: {s.n} rows {s.first:%H:%M:%S.%f}"
                       f"..{s.last:%H:%M:%S.%f}" for s in sessions)
    runs = [(r.app, r.returncode) for r in first.runs + second.runs]
    print(report, *(f"{r.app} exit {r.returncode}: {r.stderr.strip()[-300:]}" for r in first.runs + second.runs),
          sep="\n")         # shown when the test fails (or with -s)
    assert unheld == [], f"rows written without the writer lock: {unheld}\n{report}"
    for before, after in zip(sessions, sessions[1:], strict=False):
        assert before.last < after.first, f"two sessions wrote at once:\n{report}"
    assert len({s.pm_start for s in sessions}) == 3, f"writes before, between and after both restarts:\n{report}"
    assert len({s.app for s in sessions}) >= 2, f"another pump took over after the kill:\n{report}"
    assert second.busy_exits()[0] is second.runs[0], runs     # the second pump is refused at once, exit 3
    odd = [(r.app, r.returncode, r.stderr[-800:]) for r in first.runs + second.runs if not expected_end(r)]
    assert odd == [], odd
    assert statuses == {"SUCCEEDED": N}
    assert ended_twice == 0 and odd_events == 0 and last_writer == 0
    assert (marks, marked_rows, overwrites) == (N, N, 0)


def test_reopened_writer_connection_holds_no_lock(app):
    """OPS-1: the writer's session dies (terminated here) and SQLAlchemy silently opens a new one on
    the same Connection: that session holds no lock, the lock's pid is forgotten with the old
    session, and the guarded write is refused (LockLost) with nothing written."""
    m = app.mailbox.put(gtdt("RW1", (1, "A1")))
    register(app)
    processor = app.processor()
    with app.engine.connect() as conn:
        assert try_lock(conn)
        old = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        conn.commit()
        kill(app.engine, old)
        with pytest.raises(DBAPIError) as dead:  # the dead session's statement fails
            conn.execute(text("SELECT 1"))
        assert is_disconnect(dead.value)
        conn.rollback()
        new = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()     # reopened silently
        conn.commit()
        assert new != old and writer_pid(conn) is None and not holds_lock(conn)
        with pytest.raises(LockLost):
            processor.step(conn)
    row = proc(app, m)
    assert (row.status, row.attempts, row.applied_at) == ("PENDING", 0, None)


def kill(engine: Engine, pid: int) -> None:
    with engine.connect() as other:
        assert other.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar_one()
    wait_for(lambda: not alive(engine, pid), "the terminated session to end", timeout=10)


def alive(engine: Engine, pid: int) -> bool:
    with engine.connect() as conn:
        return bool(conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE pid = :p"), {"p": pid}).scalar())

