"""The fault matrix: one table, fault -> expected outcome, each row run against PRIVATE PostgreSQL,
MariaDB, Redis and tansu servers that this module starts and kills by PID on free loopback ports.

Every row runs the same mailbox workload (``workload``) through ``msgx pump`` subprocesses (the Redis
projection configured, so the two-transaction path with its post-commit step is the one under test)
into a state database of its own, injects its fault, lets msgx recover the way production does
(restart the pump, start the server again, an operator's command), and then checks:

- nothing lost: every mailbox row terminal with the verdict of the in-order reference run;
- nothing doubled: each message's outbox events exactly the reference's (or, where arrival order
  legitimately changes events, no message with events twice);
- state equal to the in-order reference: flights, gates (and the Redis projection equal to
  PostgreSQL where Redis is configured);
- marks written once: a test-only trigger on the private mailbox logs every change of
  CMINMSGS_DATE_PROCESSED; each row is marked exactly once (twice only where an operator reset it).

Proves US-03 AC6/AC8, INV-17b, INV-20b, INV-8, INV-23, US-09 AC2, C-15, OPS-1, US-01 AC3/AC5, D22,
C-29 (one oversize Kafka record holds back only its own flight), OPS-2 and F18 (a blocked log
output does not block processing), F1 with US-08 AC3 and C-24 (a host clock step neither times a
request out early nor late). docs/faults.md lists every row for the operator.
The observed outcome of every row is printed (``-s``) as a line of the table, and the time it took
to recover as a ``RECOVERY`` line (``tests/recovery.py``; docs/faults.md's "measured" column).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from datetime import time as dt_time
from pathlib import Path
from zoneinfo import ZoneInfo

import pymysql
import pytest
from sqlalchemy import func, select, text

from msgx_engine.clock import SystemClock
from msgx_engine.db import make_engine
from msgx_engine.delivery.dispatcher import Dispatcher, DispatchOptions
from msgx_engine.delivery.producer import KafkaSink
from msgx_engine.delivery.projection import Projection, connect
from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.mailbox.tables import cminmsgs
from msgx_engine.store import migrate
from msgx_engine.store.outbox import SendPolicy
from msgx_engine.store.tables import msg_event
from tests.builders import envelope, gtdt
from tests.clock_shims import WALL_CLOCK_SHIM
from tests.conftest import MSGX_BIN, read_topic
from tests.e2e.test_pipeline_crash import outcome
from tests.private_servers import PrivateServers, start_private_servers, wait_for
from tests.recovery import recovery
from tests.silent_proxy import SilentProxy

N = 400
FLIGHTS = 24
IGNORED_ID = 210    # mailbox id of an ignored LDM row (workload index 209): its arrival order changes no flight

# A test-only trigger on the PRIVATE mailbox: every write of the mark is logged (C-14 concerns the
# production mailbox; this one is ours).
MARK_LOG = (
    "CREATE TABLE mark_log (id BIGINT NOT NULL)",
    "CREATE TRIGGER mark_log_trg AFTER UPDATE ON cminmsgs FOR EACH ROW "
    "INSERT INTO mark_log (id) SELECT NEW.CMINMSGS_ID FROM DUAL "
    "WHERE NOT (OLD.CMINMSGS_DATE_PROCESSED <=> NEW.CMINMSGS_DATE_PROCESSED)")



# Debian's libfaketime (the library behind `faketime`), preloaded into one msgx process with a
# fixed offset: its host clock, C libraries included, starts there. (A step inside a running Python
# process cannot be made with it here: with the monotonic clock left alone, as a real step leaves
# it, libfaketime 0.9.10 makes time.sleep fail with EINVAL; the matrix steps running processes with
# WALL_CLOCK_SHIM instead.)
LIBFAKETIME = next(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"), None)

# The request-tracking loop of `request_tracking_job` (track_for over a RequestTracker on the
# installation's clock) in a plain process; after each round it notes how many rounds ran and the
# host's wall time it read, so the test knows a round ran under the stepped clock.
TRACKING_LOOP = textwrap.dedent('''
    import sys
    import time

    from msgx_engine.app import App
    from msgx_engine.requests.tracker import RequestTracker, track_for

    app = App.from_settings()
    rounds = 0

    def pause(seconds):
        global rounds
        rounds += 1
        with open(sys.argv[1], "w") as f:
            f.write(f"{rounds} {time.time()}")
        time.sleep(seconds)

    track_for(RequestTracker(app.engine, app.mailbox, app.clock), float(sys.argv[2]), 0.2, sleep=pause)
''')

# What `snapshot_request_job` registers (tomorrow's day plan), on the installation's clock.
REGISTER_TOMORROW = textwrap.dedent('''
    from msgx_dagster.jobs.requests import rqfd_for_tomorrow
    from msgx_engine.app import App
    from msgx_engine.requests.tracker import RequestTracker

    app = App.from_settings()
    print(rqfd_for_tomorrow(RequestTracker(app.engine, app.mailbox, app.clock), app.clock.now())[0].fday)
''')

def workload() -> list[str]:
    """GTDT over FLIGHTS flights, with resends (duplicates), ignored LDM and malformed rows."""
    out: list[str] = []
    for i in range(N):
        if i % 97 == 5:
            out.append(out[i - 3])
        elif i % 101 == 7:
            out.append(envelope("LDM", "NONE", "<X/>\n", seqn=910000 + i))
        elif i % 151 == 9:
            out.append("<MSG><META>broken")
        else:
            out.append(gtdt(f"FM{i % FLIGHTS:02d}", (1, f"G{i % 13}"), (2, f"H{i % 7}"), seqn=810000 + i))
    return out


# --- one installation under test -----------------------------------------------------------
@dataclass
class Running:
    proc: subprocess.Popen
    log: Path
    gate: Path | None = None       # held at a step while this file exists (MSGX_FAULT_HOLD)

    def release(self) -> None:
        """Let a process held at its step go on."""
        if self.gate is not None:
            self.gate.unlink(missing_ok=True)

    def finish(self, timeout: float = 300) -> tuple[int, str]:
        """Wait for the exit (kill it on timeout): the exit code and everything it wrote."""
        self.release()
        try:
            self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode, self.log.read_text()

    def stop(self) -> None:
        self.release()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@dataclass
class Install:
    """A state database on the private PostgreSQL and a mailbox on the private MariaDB."""

    servers: PrivateServers
    name: str
    mailbox_url: str
    home: Path
    redis_db: int | None = None
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def db_url(self) -> str:
        return self.servers.pg.url(self.name)

    def env(self, **extra: str) -> dict[str, str]:
        e = {k: v for k, v in os.environ.items() if not k.startswith("MSGX_")}
        e.update(MSGX_DB_URL=self.db_url, MSGX_MAILBOX_URL=self.mailbox_url, MSGX_HOME=str(self.home),
                 **self.extra_env, **extra)
        if self.redis_db is not None and "MSGX_REDIS_URL" not in e:     # a row may route Redis through a proxy
            e["MSGX_REDIS_URL"] = self.servers.redis_url(self.redis_db)
        return e

    def msgx(self, *args: str, timeout: float = 300, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([MSGX_BIN, *args], env=self.env(**extra), capture_output=True, text=True,
                              timeout=timeout)

    def start(self, *args: str, stderr: int | None = None, **extra: str) -> Running:
        """A background ``msgx`` whose output goes to a file (a pipe nobody reads could block it;
        ``stderr``: a file descriptor its stderr goes to instead, the log sink row's full pipe)."""
        return self.start_argv([MSGX_BIN, *args], stderr=stderr, **extra)

    def start_argv(self, argv: list[str], stderr: int | None = None, **extra: str) -> Running:
        """Any command in the installation's environment, in the background as ``start``."""
        log = self.home / f"msgx-{time.monotonic_ns()}.log"
        with log.open("w") as out:
            proc = subprocess.Popen(argv, env=self.env(**extra), stdout=out,
                                    stderr=subprocess.STDOUT if stderr is None else stderr)
        return Running(proc, log)

    def pump(self, **extra: str) -> subprocess.CompletedProcess:
        return self.msgx("pump", "--drain", **extra)

    def count(self, where: str = "TRUE") -> int:
        """proc_state rows matching ``where`` (0 while the server is away)."""
        try:
            engine = make_engine(self.db_url)
            try:
                with engine.connect() as conn:
                    return int(conn.execute(text(f"SELECT count(*) FROM proc_state WHERE {where}")).scalar_one())
            finally:
                engine.dispose()
        except Exception:  # noqa: BLE001 - the server may be restarting
            return 0

    def query(self, sql: str, **params):
        engine = make_engine(self.db_url)
        try:
            with engine.connect() as conn:
                return conn.execute(text(sql), params).fetchall()
        finally:
            engine.dispose()

    def mark_writes(self) -> Counter:
        with Mailbox(self.mailbox_url).engine.connect() as conn:
            return Counter(r[0] for r in conn.execute(text("SELECT id FROM mark_log")))

    def projection_drift(self) -> int:
        assert self.redis_db is not None
        engine = make_engine(self.db_url)
        try:
            return Projection(connect(self.servers.redis_url(self.redis_db))).drift(engine).total
        finally:
            engine.dispose()


def fill(mailbox_url: str, bodies: list[str]) -> None:
    mb = Mailbox(mailbox_url)
    with mb.engine.begin() as conn:
        conn.execute(cminmsgs.insert(), [{"CMINMSGS_CLOB_MSG": b, "CMINMSGS_STATUS": "VALID"} for b in bodies])
    mb.dispose()


class Lab:
    """Makes installations on the module's private servers."""

    def __init__(self, servers: PrivateServers, root: Path) -> None:
        self.servers, self.root, self.n = servers, root, 0

    def mailbox(self) -> str:
        self.n += 1
        url = self.servers.mariadb.database(f"mbx{self.n}")
        mb = Mailbox(url)
        mb.init()
        with mb.engine.connect() as conn:
            for statement in MARK_LOG:
                conn.execute(text(statement))
        mb.dispose()
        return url

    def install(self, mailbox_url: str | None = None, *, redis: bool = True,
                tablespace: str | None = None) -> Install:
        self.n += 1
        name = f"state{self.n}"
        self.servers.pg.create(name, tablespace=tablespace)
        engine = make_engine(self.servers.pg.url(name))
        migrate.upgrade(engine)
        engine.dispose()
        home = self.root / name
        home.mkdir()
        redis_db = self.n % 16 if redis else None
        if redis_db is not None:
            connect(self.servers.redis_url(redis_db)).flushdb()
        return Install(self.servers, name, mailbox_url or self.mailbox(), home, redis_db)


# --- checks ------------------------------------------------------------------------------------
def converged(inst: Install, reference: dict, *, events: str = "equal", marks: int = 1,
              skipped: int | None = None) -> dict:
    """The row's end state against the in-order reference (see the module doc). ``events``:
    ``equal`` (every message's outbox events exactly the reference's) or ``single`` (no message's
    events twice: arrival order changes events, never doubles them). ``skipped``: the mailbox id
    an operator skipped (its row is gone: it has no effect, no events and no mark)."""
    got = outcome(inst.db_url, inst.mailbox_url)
    as_reference(got, reference, events=events, skipped=skipped)
    writes = inst.mark_writes()
    assert len(writes) == N - (skipped is not None) and set(writes.values()) == {marks}, \
        f"marks written {set(writes.values())} times"
    drift = inst.projection_drift() if inst.redis_db is not None else None
    assert drift in (None, 0), f"Redis projection differs from PostgreSQL on {drift} flight(s)"
    return {"terminal": len(got["terminal_writes"]), "events": len(got["events"]), "drift": drift}


def as_reference(got: dict, reference: dict, *, events: str = "equal", skipped: int | None = None,
                 n: int = N) -> None:
    """The comparison ``converged`` makes, for any run of ``n`` mailbox rows (``bench/`` reuses
    it): ``got`` and ``reference`` as ``outcome`` returns them. Nothing lost (every row terminal
    with the reference's verdict), nothing doubled (each terminal status written once, events as
    the reference's), nothing rewound (flights and gates as the reference's), nothing left open."""
    expected = [(i, "SKIPPED", "operator_skip", None) if i == skipped else (i, s, r, d)
                for i, s, r, d in reference["statuses"]]
    assert got["statuses"] == expected, "a message lost or with another verdict"
    assert set(got["terminal_writes"].values()) == {1} and len(got["terminal_writes"]) == n
    assert got["gates"] == reference["gates"], "flight state differs from the in-order reference"
    assert [f[0] for f in got["flights"]] == [f[0] for f in reference["flights"]]
    if events == "equal":
        assert got["flights"] == reference["flights"]
        assert got["events"] == reference["events"], "events differ from the reference (doubled or lost)"
    else:
        per_message = Counter((e[0], e[1], e[2]) for e in got["events"])
        assert max(per_message.values()) == 1, "a message's events were written twice"
    assert got["todo_open"] == 0 and got["unmarked"] == 0


# --- the rows --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    fault: str
    expected: str
    run: Callable[[Lab, dict], str]      # returns the observed outcome (one line)


def kill_at(step: str) -> Callable[[Lab, dict], str]:
    def run(lab: Lab, reference: dict) -> str:
        inst = lab.install()
        fill(inst.mailbox_url, workload())
        killed = inst.pump(MSGX_FAULT_STEP=step)
        assert killed.returncode == -9, f"the fault {step} did not fire: {killed.stderr[-1500:]}"
        mid = inst.count("status IN ('SUCCEEDED','SKIPPED','DEAD')")
        todos = inst.query("SELECT count(*) AS n FROM backfill_todo WHERE status = 'PENDING'")[0].n
        assert 0 < mid and (mid < N or todos), "the kill left nothing to redo"
        restarted = time.monotonic()
        done = inst.pump()
        assert done.returncode == 0, done.stderr[-2000:]
        recovery(f"kill -9 of the pump {step.split(':')[0]}", restarted, "pump started again -> last row processed")
        c = converged(inst, reference)
        return f"killed with {mid}/{N} terminal; restart finished; {c['events']} events as reference, drift 0"
    return run


def pump_mid_run(lab: Lab, hold_again: Path | None = None, *, redis_port: int | None = None,
                 stderr: int | None = None, **env: str) -> tuple[Install, Running]:
    """A fresh installation with the workload, its ``pump --drain`` running and part-way through:
    held after its 60th terminal message (``MSGX_FAULT_HOLD``) until the caller has broken a
    server and calls ``release()`` (or ``finish()``), so the break lands mid-run however fast the
    pump drains the rest. ``hold_again``: held once more after the 80th, while that file exists.
    ``redis_port``: the pump reaches Redis there (a proxy in front of the private one);
    ``stderr``: the pump's stderr is this file descriptor instead of its log; ``env``: more of its
    environment."""
    inst = lab.install()
    if redis_port is not None:
        inst.extra_env["MSGX_REDIS_URL"] = f"redis://127.0.0.1:{redis_port}/{inst.redis_db}"
    fill(inst.mailbox_url, workload())
    gate = inst.home / "hold-mid-run"
    gate.touch()
    holds = f"after_tx2:60:{gate}"
    if hold_again is not None:
        hold_again.touch()
        holds += f",after_tx2:80:{hold_again}"
    runner = inst.start("pump", "--drain", MSGX_FAULT_HOLD=holds, stderr=stderr, **env)
    runner.gate = gate
    try:
        wait_for(lambda: gate.with_name(gate.name + ".held").exists(), "the pump to be mid-run", 120)
    except AssertionError:
        runner.stop()
        raise
    assert N - 60 > inst.count("status IN ('SUCCEEDED','SKIPPED','DEAD')") >= 60
    return inst, runner


def postgres_killed(lab: Lab, reference: dict) -> str:
    inst, runner = pump_mid_run(lab)
    try:
        lab.servers.pg.kill()
        runner.release()
        wait_for(_started(lab.servers.pg), "PostgreSQL to start again after its kill", 60)
        back = time.monotonic()
        rc, err = runner.finish()
    finally:
        runner.stop()
    assert rc == 0, err[-2000:]
    assert "reconnected" in err
    recovery("PostgreSQL killed", back, "PostgreSQL started -> last row processed")
    converged(inst, reference)
    return "pump reconnected and re-took its lock; every row once; state, events, marks as reference"


def mariadb_killed(lab: Lab, reference: dict) -> str:
    return mariadb_away(lab, reference, clean=False)


def mariadb_shut_down(lab: Lab, reference: dict) -> str:
    """A clean shutdown (SIGTERM, waited for: what ``mysqladmin shutdown`` and ``systemctl stop``
    do) tells each open connection "server shutdown in progress" before closing it, where a kill
    just drops them: the pump goes on and recovers as from a kill."""
    return mariadb_away(lab, reference, clean=True)


def mariadb_away(lab: Lab, reference: dict, *, clean: bool) -> str:
    """MariaDB taken away under a running pump (``clean``: shut down, else kill -9) and started
    again: registered work goes on, the marks follow, the mailbox lock is taken again."""
    again = lab.root / f"hold-again-{lab.n}"
    inst, runner = pump_mid_run(lab, hold_again=again)
    try:
        if clean:
            lab.servers.mariadb.stop()
        else:
            lab.servers.mariadb.kill()
        runner.release()
        # the bodies read ahead keep the pump going without the mailbox: it finishes its 61st to 80th
        # messages, all after the mailbox went away, and is held again after the 80th, so it cannot
        # finish and exit before the mailbox is back. (Its own count is the proof: with group commit
        # the table may already hold more than 80 finished rows at the first hold, so a count of
        # SUCCEEDED rows before and after proves nothing and failed once when no group committed.)
        wait_for(lambda: again.with_name(again.name + ".held").exists(), "the pump to go on without the mailbox", 120)
        lab.servers.mariadb.start()
        back = time.monotonic()
        again.unlink()
        rc, err = runner.finish()
    finally:
        again.unlink(missing_ok=True)
        runner.stop()
    assert rc == 0, err[-2000:]
    assert "taken again after a lost connection" in err, "the pump did not take the mailbox lock again"
    restarts = 0
    while inst.count("TRUE") < N or _unmarked(inst):         # the sensor starts the pump again
        restarts += 1
        assert restarts <= 5
        assert inst.pump().returncode == 0
    recovery(f"MariaDB {'shut down' if clean else 'killed'}", back, "MariaDB started -> last row processed and marked")
    converged(inst, reference)
    return (f"{'shut down' if clean else 'killed'}: processing went on from registered rows; marks backed off "
            f"and followed ({restarts} more "
            "pump run(s)); mailbox lock re-taken; every mark once")


def redis_outage(lab: Lab, reference: dict) -> str:
    """D22 (INV-23): with Redis away the head waits, open and unterminated, its retries backing off
    1, 1, 2, 4, 8, 16 and then 30 s (the cap) for as long as it takes, using no attempt and never
    going DEAD; nothing overtakes it; when Redis returns the projection is repaired (drift 0)."""
    inst, runner = pump_mid_run(lab)
    waiting = ("status = 'FAILED' AND error_class = 'PROJECTION' "
               "AND next_attempt_at - updated_at >= interval '29.5 seconds'")
    try:
        lab.servers.redis.kill()
        runner.release()
        wait_for(lambda: inst.count(waiting) == 1, "the waiting head to reach the 30 s cap", 150)
        head = inst.query("SELECT msg_id, attempts, extract(epoch FROM next_attempt_at - updated_at) AS delay, "
                          "(SELECT count(*) FROM proc_state_hst h WHERE h.msg_id = p.msg_id "
                          " AND h.error_class = 'PROJECTION') AS looks FROM proc_state p WHERE status = 'FAILED'")
        assert len(head) == 1 and head[0].delay <= 30.0 and head[0].attempts == 0
        assert inst.count(f"msg_id > {int(head[0].msg_id)} AND status IN ('SUCCEEDED','SKIPPED','DEAD')") == 0, \
            "a later message overtook the waiting head"
        lab.servers.redis.start()
        back = time.monotonic()
        rc, err = runner.finish()
    finally:
        runner.stop()
    assert rc == 0, err[-2000:]
    recovery("Redis killed", back, "Redis started -> last row processed")
    c = converged(inst, reference)
    return (f"head {head[0].msg_id} waited open: {head[0].looks} looks, next in {head[0].delay:.0f}s (the cap), "
            f"0 attempts used, nothing overtook it, never DEAD; after Redis returned all done, drift {c['drift']}")


def redis_black_holed(lab: Lab, reference: dict) -> str:
    """D22 (INV-23): Redis reached through a proxy that goes silent (connections
    stay open, nothing is forwarded, as behind a black-holed route) past the projection's 2 s
    client timeout: each look at the head fails on that timeout instead of hanging, the head waits
    open using no attempt, nothing overtakes it; when bytes flow again the pump finishes by itself."""
    proxy = SilentProxy(("127.0.0.1", lab.servers.redis.port))
    looks = ("SELECT count(*) AS n FROM proc_state_hst WHERE error_class = 'PROJECTION'")
    try:
        inst, runner = pump_mid_run(lab, redis_port=proxy.port)
        try:
            proxy.holding.set()
            runner.release()
            wait_for(lambda: inst.query(looks)[0].n >= 3, "three looks at the head, each past the Redis timeout", 120)
            head = inst.query("SELECT msg_id, attempts, error_detail FROM proc_state WHERE status = 'FAILED'")
            assert len(head) == 1 and head[0].attempts == 0, head
            assert inst.count(f"msg_id > {int(head[0].msg_id)} AND status IN ('SUCCEEDED','SKIPPED','DEAD')") == 0, \
                "a later message overtook the waiting head"
            proxy.holding.clear()
            back = time.monotonic()
            rc, err = runner.finish()
            recovery("Redis black-holed", back, "bytes flow again -> last row processed")
        finally:
            runner.stop()
    finally:
        proxy.holding.clear()
        proxy.stop()
    assert rc == 0, err[-2000:]
    c = converged(inst, reference)
    return (f"head {head[0].msg_id} waited open through {inst.query(looks)[0].n} looks that timed out "
            f"({(head[0].error_detail or '')[:60]}), 0 attempts, nothing overtook it; when Redis answered the "
            f"pump finished by itself, drift {c['drift']}")


def log_sink_blocked(lab: Lab, reference: dict) -> str:
    """OPS-2 ("日志出口断开不阻塞业务"): the pump's stderr is a pipe that is full
    and that nobody reads (a log collector that hangs) from before the pump starts, with every
    INFO line logged: the pump processes the whole mailbox and exits anyway, dropping the lines
    the sink cannot take."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    try:
        filled = 0
        with contextlib.suppress(BlockingIOError):
            while True:
                filled += os.write(write_end, b"x" * 4096)
        os.set_blocking(write_end, True)
        inst, runner = pump_mid_run(lab, stderr=write_end, MSGX_LOG_LEVEL="INFO")
        try:
            released = time.monotonic()
            rc, _ = runner.finish(timeout=240)
            recovery("log sink blocked", released, "never lifted: pump released mid-run -> last row processed, "
                     "the sink still full")
        finally:
            runner.stop()
    finally:
        os.close(write_end)
        os.close(read_end)
    assert rc == 0, "the pump did not finish with its log sink blocked"
    converged(inst, reference)
    return f"stderr pipe full ({filled} bytes) and unread from the start: every row processed once, pump exited 0"


def broker_killed(lab: Lab, reference: dict) -> str:
    """The dispatcher (its own worker) under a kill -9 of the broker: nothing is marked sent without
    a delivery report; the next dispatcher run (the scheduled job starts one every minute) delivers
    every event that was not yet sent, with its event_id."""
    inst = lab.install(redis=False)
    fill(inst.mailbox_url, workload())
    assert inst.pump().returncode == 0
    engine = make_engine(inst.db_url)
    topic, bootstrap = f"msg_{inst.name}", lab.servers.tansu.bootstrap  # type: ignore[attr-defined]

    first_batch, broker_gone = threading.Event(), threading.Event()

    class PausingSink(KafkaSink):
        """Holds the dispatcher after its first delivered batch until the broker has been killed,
        so the kill lands mid-run whatever the machine's speed."""

        def send(self, records):
            result = super().send(records)
            if not first_batch.is_set():
                first_batch.set()
                broker_gone.wait(60)
            return result

    def dispatcher(run_for_s: float, should_stop: Callable[[], bool]) -> Dispatcher:
        return Dispatcher(engine, PausingSink(bootstrap, delivery_timeout_s=2.0), SystemClock(), topic_msg=topic,
                          topic_schd=f"schd_{inst.name}", should_stop=should_stop,
                          options=DispatchOptions(run_for_s=run_for_s, poll_s=0.05, schd_flush_s=0.5, msg_batch=50,
                                                  policy=SendPolicy(backoff_base_s=0.2, backoff_cap_s=0.5)))

    def sent() -> int:
        with engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(msg_event).where(
                msg_event.c.topic == "msg", msg_event.c.sent_at.is_not(None))).scalar_one())

    with engine.connect() as conn:
        total = int(conn.execute(select(func.count()).select_from(msg_event)
                                 .where(msg_event.c.topic == "msg")).scalar_one())
    stop = threading.Event()
    thread = threading.Thread(target=dispatcher(300, stop.is_set).run)
    thread.start()
    try:
        assert first_batch.wait(60), "the dispatcher never delivered a batch"
        lab.servers.tansu.kill()
        broker_gone.set()
        wait_for(lambda: _send_errors(engine) > 0, "the dispatcher to notice the broker is gone")
    finally:
        stop.set()
        thread.join(60)
    try:
        with engine.connect() as conn:
            unsent = {r[0] for r in conn.execute(select(msg_event.c.event_id).where(
                msg_event.c.topic == "msg", msg_event.c.sent_at.is_(None)))}
        assert unsent and sent() + len(unsent) == total
        lab.servers.tansu.start()
        back = time.monotonic()
        dispatcher(120, lambda: sent() == total).run()      # the next scheduled run (the events back off first)
        assert sent() == total, "the next dispatcher run left events unsent"
        recovery("tansu killed", back, "tansu started -> last event delivered by the next dispatcher run")
    finally:
        engine.dispose()
    records = read_topic(bootstrap, topic, len(unsent))
    got = Counter(int(r.headers["event_id"]) for r in records)
    assert unsent <= set(got), "an event unsent at the kill never reached the broker"
    converged(inst, reference)
    return (f"{len(unsent)} of {total} events unsent at the kill (none marked without a report); the next "
            f"dispatcher run delivered all of them, {sum(1 for v in got.values() if v > 1)} twice (at-least-once)")


def kafka_oversize_record(lab: Lab, reference: dict) -> str:
    """C-29: one outbox record too large for Kafka (a row written before the
    record limit existed: new ones are refused at processing time, DEAD(oversize)). `msgx dispatch
    --drain` delivers every other flight's events at once; the record backs off with its error and
    its flight's later events wait behind it, untried. Once an operator has repaired the row, the
    next run delivers the rest; every flight's records are in event order on the topic."""
    inst = lab.install(redis=False)
    fill(inst.mailbox_url, workload())
    assert inst.pump().returncode == 0
    topic, bootstrap = f"msg_{inst.name}", lab.servers.tansu.bootstrap  # type: ignore[attr-defined]
    kafka = {"MSGX_KAFKA_BOOTSTRAP": bootstrap, "MSGX_TOPIC_MSG": topic, "MSGX_TOPIC_SCHD": f"schd_{inst.name}"}
    (head, flid, payload), = inst.query(
        "SELECT event_id, flid, payload FROM msg_event WHERE topic = 'msg' ORDER BY event_id LIMIT 1")
    _execute(inst, "UPDATE msg_event SET payload = :p WHERE event_id = :e", p="x" * 1_200_000, e=head)
    first = inst.msgx("dispatch", "--drain", **kafka)
    assert first.returncode == 1, first.stdout + first.stderr      # events remain: the stuck flight's
    rows = inst.query("SELECT event_id, flid, sent_at IS NOT NULL, send_attempts, send_error FROM msg_event "
                      "WHERE topic = 'msg' ORDER BY event_id")
    others = [r for r in rows if r[1] != flid]
    held = [r for r in rows if r[1] == flid and r[0] != head]
    stuck = next(r for r in rows if r[0] == head)
    assert all(r[2] for r in others), "another flight's event was held back"
    assert held and not any(r[2] or r[3] for r in held), "the stuck flight's later events overtook it"
    assert not stuck[2] and stuck[3] == 1 and "too large" in stuck[4].lower()
    _execute(inst, "UPDATE msg_event SET payload = :p, next_send_at = NULL WHERE event_id = :e",
             p=payload, e=head)       # the operator's repair
    repaired = time.monotonic()
    again = inst.msgx("dispatch", "--drain", **kafka)
    assert again.returncode == 0, again.stdout + again.stderr
    recovery("one Kafka record too large", repaired, "the operator's repair -> last event delivered by msgx dispatch")
    records = read_topic(bootstrap, topic, len(rows))
    order: dict[str, list[int]] = {}
    for r in records:
        order.setdefault(r.key, []).append(int(r.headers["event_id"]))
    assert all(ids == sorted(ids) for ids in order.values()), "a flight's records out of order"
    assert order[flid][0] == head and {i for ids in order.values() for i in ids} == {r[0] for r in rows}
    converged(inst, reference)
    return (f"{len(others)} events of other flights delivered in the first run; {flid}'s head refused "
            f"({stuck[4][:40]}...), its {len(held)} later events waited untried; after the repair all "
            f"{len(rows)} delivered, per-flight order kept")


def row_deleted_before_processing(lab: Lab, reference: dict) -> str:
    """C-12, D24: a registered row deleted from the mailbox before the pump reaches it holds the
    head (open, an ALERT, looked for again every 30 s, nothing overtakes it) until an operator
    skips it (audited); then everything behind it proceeds. Its flight's later messages rewrite the
    same gates, so the state equals the reference; versions and events lack the skipped one."""
    inst = lab.install()
    fill(inst.mailbox_url, workload())
    assert inst.pump(MSGX_FAULT_STEP="before_tx1_commit:1").returncode == -9    # every row registered
    gone = 50
    with Mailbox(inst.mailbox_url).engine.begin() as conn:
        conn.execute(cminmsgs.delete().where(cminmsgs.c.CMINMSGS_ID == gone))
    waited = inst.pump()                   # a drain ends when the head waits for an operator
    assert waited.returncode == 0, waited.stderr[-2000:]
    assert f"ALERT mailbox id {gone}" in waited.stderr
    assert inst.count(f"msg_id = {gone} AND status = 'FAILED' AND error_class = 'SOURCE_MISSING'") == 1
    assert inst.count(f"msg_id > {gone} AND status IN ('SUCCEEDED','SKIPPED','DEAD')") == 0
    skip = inst.msgx("skip", str(gone), "--operator", "fault-matrix", "--reason", "row deleted in the mailbox")
    assert skip.returncode == 0, skip.stdout + skip.stderr
    skipped = time.monotonic()
    done = inst.pump()
    assert done.returncode == 0, done.stderr[-2000:]
    recovery("a registered row deleted", skipped, "msgx skip done -> last row processed by the next drain")
    converged(inst, reference, events="single", skipped=gone)
    return (f"head {gone} waited open with an ALERT (the drain ended there), nothing overtook it; msgx skip "
            "(audited) ended it SKIPPED(operator_skip); the next drain did the rest, as reference")


def restore_from_older_dump(lab: Lab, reference: dict) -> str:
    inst = lab.install()
    bodies = workload()
    fill(inst.mailbox_url, bodies[:N // 2])
    assert inst.pump().returncode == 0
    dump = lab.servers.pg.dump(inst.name)
    fill(inst.mailbox_url, bodies[N // 2:])
    assert inst.pump().returncode == 0
    lab.servers.pg.restore(inst.name, dump)
    refused = inst.pump()
    assert refused.returncode == 4, refused.stdout + refused.stderr
    assert f"{N - N // 2} row(s) with ids {N // 2 + 1}..{N}" in refused.stderr
    preview = inst.msgx("recover")
    assert preview.returncode == 0 and f"{N // 2 + 1}-{N}" in preview.stdout, preview.stdout + preview.stderr
    applied = time.monotonic()
    done = inst.msgx("recover", "--apply", "--operator", "fault-matrix", "--reason", "restored from an older dump")
    assert done.returncode == 0, done.stdout + done.stderr
    recovery("state restored from an older pg_dump", applied, "msgx recover --apply started -> it ended, all replayed")
    audit = inst.query("SELECT action, operator, outcome FROM operator_audit")
    assert [(a.action, a.operator) for a in audit] == [("recover", "fault-matrix")]
    converged(inst, reference)
    return (f"pump refused (exit 4) naming ids {N // 2 + 1}..{N}; msgx recover re-registered and replayed "
            "them, rebuilt the projection; audited; state, events, marks as reference")


def two_installations(lab: Lab, reference: dict) -> str:
    first = lab.install()
    second = lab.install(first.mailbox_url)
    fill(first.mailbox_url, workload())
    runner = first.start("pump", "--idle-for", "120")        # long-lived: it keeps the mailbox
    try:
        wait_for(lambda: first.count("status IN ('SUCCEEDED','SKIPPED','DEAD')") == N and not _unmarked(first),
                 "the first installation to process everything", 180)
        tried = time.monotonic()
        other = second.pump()
        recovery("two installations on one mailbox", tried, "the second pump started -> it exited naming the holder")
    finally:
        runner.stop()
    assert other.returncode == 3, other.stdout + other.stderr
    assert "another msgx installation" in other.stderr and "from host" in other.stderr
    assert second.count("TRUE") == 0
    converged(first, reference)
    return "the second installation exited at once (exit 3) naming the holder's host; it registered nothing"


def clock_stepped_back(lab: Lab, reference: dict) -> str:
    """A backward step of the host's wall clock while the head waits for a gap: the grace still
    ends after gap_grace_s (the old offset clock stalled for the size of the step)."""
    inst = lab.install(redis=False)
    offset = _wall_clock_shim(inst)
    bodies = workload()
    hole = IGNORED_ID
    _fill_with_hole(inst.mailbox_url, bodies, hole)
    runner = inst.start("pump", "--drain")
    try:
        wait_for(lambda: _gap_seen(inst, hole), "the gap to be recorded")
        offset.write_text("-3600")
        stepped = time.monotonic()
        rc, err = runner.finish(timeout=120)       # the old clock stalled for an hour here
    finally:
        runner.stop()
    assert rc == 0, err[-2000:]
    recovery("host clock stepped back 1 h in a gap grace", stepped,
             "the step -> the pump done, the gap passed after its grace")
    passed = inst.query("SELECT passed_at IS NOT NULL AS passed FROM intake_gap WHERE msg_id = :h", h=hole)
    assert passed and passed[0].passed
    _insert_at(inst.mailbox_url, hole, bodies[hole - 1])
    assert inst.pump().returncode == 0
    converged(inst, reference)
    return "host clock stepped back 1 h while the head waited for a gap: the gap passed after its grace, no stall"


def clock_stepped_forward(lab: Lab, reference: dict) -> str:
    """A forward step inside the grace does not expire it early: the smaller id committed within the
    grace is processed in order, not as a late arrival."""
    inst = lab.install(redis=False)
    inst.extra_env["MSGX_GAP_GRACE_S"] = "30"
    offset = _wall_clock_shim(inst)
    bodies = workload()
    hole = IGNORED_ID
    mb = fill_holding(lab, inst, bodies, hole)
    runner = inst.start("pump", "--drain")
    try:
        wait_for(lambda: _gap_seen(inst, hole), "the gap to be recorded")
        offset.write_text("3600")
        time_stepped = time.monotonic()
        mb.commit()
        commit_after = time.monotonic() - time_stepped
        rc, err = runner.finish(timeout=180)
    finally:
        mb.close()
        runner.stop()
    assert rc == 0, err[-2000:]
    recovery("host clock stepped forward 1 h in a gap grace", time_stepped, "the step -> last row processed, in order")
    row = inst.query("SELECT late_arrival FROM proc_state WHERE msg_id = :h", h=hole)
    gap = inst.query("SELECT passed_at IS NULL AS waiting, arrived_at IS NOT NULL AS arrived "
                     "FROM intake_gap WHERE msg_id = :h", h=hole)
    assert row and row[0].late_arrival is False, "the gap expired early: the row came as a late arrival"
    assert gap and gap[0].waiting and gap[0].arrived
    converged(inst, reference)
    return (f"host clock stepped forward 1 h inside a 30 s grace; the row committed "
            f"{commit_after:.1f}s later was still awaited and processed in order")


def clock_stepped_during_requests(lab: Lab, reference: dict) -> str:
    """F1, US-08 AC3, C-24: the host's wall clock stepped an hour forward and then two hours back
    under a running request-tracking loop (and the pump draining the workload) while an RQRD waits
    for its answer: it times out 30 s after it was sent by PostgreSQL's clock, neither at once on
    the forward step nor an hour late after the back step, and is written to COUTMSGS once. The
    day the 22:00 schedule's job asks for is PostgreSQL's tomorrow even in a process whose host
    clock (libfaketime) is already past midnight. The workload converges as the reference."""
    if LIBFAKETIME is None:
        pytest.fail("libfaketime is not installed (scripts/services.sh installs faketime)", pytrace=False)
    inst = lab.install(redis=False)
    offset, seen = _wall_clock_shim(inst), inst.home / "tracking-rounds"
    fill(inst.mailbox_url, workload())
    registered = inst.msgx("request", "rqrd", "GLST")
    assert registered.returncode == 0, registered.stdout + registered.stderr
    sent_age = ("SELECT status, extract(epoch FROM clock_timestamp() - sent_at) AS age, "
                "extract(epoch FROM done_at - sent_at) AS waited, coutmsgs_id FROM req_track")

    def rounds_under(shift: int) -> None:
        """Step the host's wall clock to ``shift`` seconds off and wait for a whole tracking round
        that read it."""
        offset.write_text(str(shift))
        first: list[int] = []

        def stepped_round() -> bool:
            try:
                n, host = seen.read_text().split()
            except (OSError, ValueError):
                return False
            if abs(float(host) - time.time() - shift) > 600:
                return False
            first[:1] = first[:1] or [int(n)]
            return int(n) > first[0]
        wait_for(stepped_round, f"a tracking round under the host clock {shift:+d} s off", 20)

    pump = inst.start("pump", "--drain")
    tracking = inst.start_argv([sys.executable, "-c", TRACKING_LOOP, str(seen), "120"])
    try:
        wait_for(lambda: inst.query(sent_age)[0].status == "SENT", "the request to be sent", 30)
        rounds_under(3600)
        forward = inst.query(sent_age)[0]
        assert forward.age < 30, "the machine was too slow to step the clock inside the timeout"
        assert forward.status == "SENT", "the forward step timed the request out early"
        rounds_under(-3600)
        stepped_back = time.monotonic()
        wait_for(lambda: inst.query(sent_age)[0].status != "SENT", "the request to time out", 60)
        recovery("host clock stepped under request tracking", stepped_back,
                 "the back step seen by a tracking round -> the request timed out (30 s after it was sent)")
        closed = inst.query(sent_age)[0]
    finally:
        tracking.stop()
    try:
        rc, err = pump.finish(timeout=240)
    finally:
        pump.stop()
    assert rc == 0, err[-2000:]
    assert closed.status == "TIMEOUT" and 30 <= closed.waited < 35, closed
    with Mailbox(inst.mailbox_url).engine.connect() as conn:
        written = conn.execute(text("SELECT count(*) FROM coutmsgs")).scalar_one()
    assert written == 1 and closed.coutmsgs_id is not None, f"{written} COUTMSGS rows for one request"
    converged(inst, reference)

    offset.write_text("0")
    db_now = inst.query("SELECT clock_timestamp() AS now")[0].now.astimezone(ZoneInfo("Asia/Shanghai"))
    past_midnight = datetime.combine(db_now.date() + timedelta(days=1), dt_time(1, 0), db_now.tzinfo) - db_now
    day = subprocess.run([sys.executable, "-c", REGISTER_TOMORROW], capture_output=True, text=True, timeout=120,
                         env=inst.env(LD_PRELOAD=str(LIBFAKETIME), FAKETIME=f"+{int(past_midnight.total_seconds())}"))
    assert day.returncode == 0, day.stderr[-2000:]
    assert day.stdout.strip() == (db_now.date() + timedelta(days=1)).isoformat(), \
        f"the host clock's day decided the day plan: {day.stdout.strip()} (PostgreSQL's today is {db_now.date()})"
    return (f"host clock +1 h when the request was {forward.age:.0f}s old: still SENT; then -1 h: timed out "
            f"{closed.waited:.1f}s after sent_at; one COUTMSGS row; the day plan asked for PostgreSQL's tomorrow "
            f"from a host clock past midnight; workload as reference")

def postgres_disk_full(lab: Lab, reference: dict) -> str:
    """PostgreSQL out of disk space for real: the state database lives in a tablespace on a small
    tmpfs, filled up under a running pump and kept full for 30 s (past the head's attempt budget)
    while a new pump is started whenever one exits, as the inbox sensor does; then the space comes
    back (the filler is deleted) and the pumps finish. Nothing is lost, doubled or rewound: the run
    converges as the reference."""
    space = lab.servers.pg.root / f"space{lab.n}"
    space.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(space)], check=True, capture_output=True)
    tablespace, inst = f"small{lab.n}", None
    try:
        shutil.chown(space, "postgres")
        lab.servers.pg.sql(f"CREATE TABLESPACE {tablespace} LOCATION '{space}'")
        inst = lab.install(tablespace=tablespace)
        filler, gate = space / "filler", inst.home / "hold-until-full"
        gate.touch()
        fill(inst.mailbox_url, workload())
        runner = inst.start("pump", "--drain", MSGX_FAULT_HOLD=f"after_tx2:60:{gate}")
        runner.gate = gate
        runs, exits = [runner], []
        try:
            wait_for(lambda: gate.with_name(gate.name + ".held").exists(), "the pump to be mid-run", 120)
            with contextlib.suppress(OSError), filler.open("wb") as f:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            runner.release()
            full_until = time.monotonic() + 30
            while time.monotonic() < full_until:         # the sensor starts a pump whenever none runs
                if runs[-1].proc.poll() is not None:
                    exits.append(runs[-1].proc.returncode)
                    runs.append(inst.start("pump", "--drain"))
                time.sleep(0.5)
            logs = "".join(r.log.read_text() for r in runs)
            head = inst.query("SELECT msg_id, attempts FROM proc_state WHERE status = 'FAILED'")
            filler.unlink()
            space_back = time.monotonic()
            runs[-1].finish(timeout=240)        # started while the disk was full, it may have exited 1
        finally:
            for r in runs:
                r.stop()
        assert "No space left on device" in logs, "the disk never filled up under the pump"
        for _ in range(5):                                   # the sensor's next runs, if any is needed
            if inst.count("TRUE") == N and not _unmarked(inst) and not inst.count("status = 'FAILED'"):
                break
            assert inst.pump().returncode == 0
        recovery("PostgreSQL out of disk space", space_back, "the space returned -> last row processed and marked")
        c = converged(inst, reference)
    finally:
        if inst is not None:
            lab.servers.pg.drop(inst.name)
        with contextlib.suppress(Exception):
            lab.servers.pg.sql(f"DROP TABLESPACE {tablespace}")
        subprocess.run(["umount", str(space)], capture_output=True)
    return (f"disk full for 30 s: {len(exits)} pump runs exited {sorted(set(exits))} (the sensor's restarts); "
            f"the head meanwhile FAILED with attempts {[(r.msg_id, r.attempts) for r in head]}, never DEAD; after "
            f"the space returned every row once, {c['events']} events as reference")

def fill_holding(lab: Lab, inst: Install, bodies: list[str], held: int) -> pymysql.Connection:
    """Fill the mailbox with ``bodies``, row ``held`` inserted by a transaction left open (its id is
    taken, the row invisible): the returned connection commits it late."""
    mb = pymysql.connect(host="127.0.0.1", port=lab.servers.mariadb.port, user="root",
                         database=inst.mailbox_url.rsplit("/", 1)[1], autocommit=False)
    fill(inst.mailbox_url, bodies[:held - 1])
    with mb.cursor() as cur:
        cur.execute("INSERT INTO cminmsgs (CMINMSGS_CLOB_MSG, CMINMSGS_STATUS) VALUES (%s, 'VALID')",
                    (bodies[held - 1],))
        assert cur.lastrowid == held
    fill(inst.mailbox_url, bodies[held:])
    return mb


def late_smaller_ids(lab: Lab, reference: dict) -> str:
    """US-01 AC5, F6: a row whose insert commits after the head passed its gap (a GTDT for a flight
    that later rows change again) is processed late and rewinds nothing: last writer wins by mailbox
    id, so the state equals the in-order reference (its events differ: it changed less)."""
    inst = lab.install()
    bodies = workload()
    late = 101          # workload index 100: a GTDT of FM04 (no resend of it), whose later rows set other gates
    mb = fill_holding(lab, inst, bodies, late)
    try:
        runner = inst.start("pump", "--drain")
        try:
            wait_for(lambda: bool(inst.query("SELECT 1 FROM intake_gap WHERE msg_id = :m AND passed_at IS NOT NULL",
                                             m=late)), "the head to pass the gap", 120)
            mb.commit()
            committed = time.monotonic()
            rc, err = runner.finish()
        finally:
            runner.stop()
    finally:
        mb.close()
    assert rc == 0, err[-2000:]
    assert inst.pump().returncode == 0                 # the sensor's next run, if the first had ended
    recovery("a late smaller id", committed, "the late row committed -> last row processed")
    row = inst.query("SELECT late_arrival FROM proc_state WHERE msg_id = :m", m=late)
    assert row and row[0].late_arrival
    c = converged(inst, reference, events="single")
    return (f"row {late} committed after its gap was passed and was processed late; gates and verdicts as the "
            f"in-order reference (last writer wins), no event doubled ({c['events']} events), every mark once")


def _wall_clock_shim(inst: Install) -> Path:
    shim = inst.home / "wallclock"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(WALL_CLOCK_SHIM)
    offset = inst.home / "wall-offset"
    offset.write_text("0")
    inst.extra_env.update(PYTHONPATH=str(shim), MSGX_TEST_WALL_OFFSET_FILE=str(offset))
    return offset


def _fill_with_hole(mailbox_url: str, bodies: list[str], hole: int) -> None:
    fill(mailbox_url, bodies[:hole - 1])
    _insert_at(mailbox_url, hole + 1, bodies[hole])
    fill(mailbox_url, bodies[hole + 1:])


def _insert_at(mailbox_url: str, msg_id: int, body: str) -> None:
    mb = Mailbox(mailbox_url)
    with mb.engine.begin() as conn:
        conn.execute(cminmsgs.insert().values(CMINMSGS_ID=msg_id, CMINMSGS_CLOB_MSG=body, CMINMSGS_STATUS="VALID"))
    mb.dispose()


def _started(pg) -> Callable[[], bool]:
    """Try to start the killed cluster (its orphaned backends may still hold shared memory)."""
    def attempt() -> bool:
        try:
            pg.ctl("start")
            return True
        except subprocess.CalledProcessError:
            return False
    return attempt


def _execute(inst: Install, sql: str, **params) -> None:
    engine = make_engine(inst.db_url)
    try:
        with engine.begin() as conn:
            conn.execute(text(sql), params)
    finally:
        engine.dispose()


def _send_errors(engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(msg_event).where(
            msg_event.c.sent_at.is_(None), msg_event.c.send_error.is_not(None))).scalar_one())


def _gap_seen(inst: Install, msg_id: int) -> bool:
    try:
        return bool(inst.query("SELECT 1 FROM intake_gap WHERE msg_id = :m", m=msg_id))
    except Exception:  # noqa: BLE001 - not migrated yet / server busy
        return False


def _unmarked(inst: Install) -> int:
    with Mailbox(inst.mailbox_url).engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM cminmsgs WHERE CMINMSGS_DATE_PROCESSED IS NULL"))
                   .scalar_one())


MATRIX = [
    Row("kill -9 of the pump before transaction 1 commits", "restart: every row once, state/events/marks as reference",
        kill_at("before_tx1_commit:150")),
    Row("kill -9 between transaction 1 and the projection", "restart redoes projection + terminal, no re-apply",
        kill_at("between_tx1_tx2:120")),
    Row("kill -9 after transaction 2", "restart: nothing redone", kill_at("after_tx2:200")),
    Row("kill -9 inside backfill (mailbox marked, todo not)", "restart: todo settles ALREADY, mark not rewritten",
        kill_at("inside_backfill:1")),
    Row("PostgreSQL kill -9 and start under a running pump", "pump reconnects, re-takes its lock, finishes",
        postgres_killed),
    Row("PostgreSQL out of disk space (the state's tablespace on a full tmpfs), then space returns",
        "nothing lost, doubled or rewound", postgres_disk_full),
    Row("MariaDB kill -9 and start under a running pump", "registered work goes on; marks follow; lock re-taken",
        mariadb_killed),
    Row("MariaDB shut down cleanly (SIGTERM, waited for) and started under a running pump",
        "registered work goes on; marks follow; lock re-taken", mariadb_shut_down),
    Row("Redis kill -9 under a running pump until the head's backoff reaches its cap (D22)",
        "head waits open, backoff capped at 30 s, no attempt used, never DEAD, nothing overtakes; projection "
        "repaired", redis_outage),
    Row("Redis black-holed (connections open, nothing forwarded) past the projection's 2 s timeout",
        "each look at the head times out; head waits open, no attempt used, nothing overtakes; finishes by itself",
        redis_black_holed),
    Row("log sink blocked: the pump's stderr a full pipe nobody reads (OPS-2)",
        "processing goes on: every row once, the pump exits 0; lines the sink cannot take are dropped",
        log_sink_blocked),
    Row("tansu kill -9 under a running dispatcher", "nothing marked sent unreported; all delivered after restart",
        broker_killed),
    Row("one Kafka record too large for the broker (a legacy outbox row)",
        "other flights delivered at once; that flight's later events wait behind it; after repair all, in order",
        kafka_oversize_record),
    Row("state restored from an older pg_dump", "pump refuses naming ids; msgx recover replays; as reference",
        restore_from_older_dump),
    Row("a registered row deleted from the mailbox before processing (C-12, D24)",
        "head waits with an ALERT, nothing overtakes; after an audited skip the rest completes",
        row_deleted_before_processing),
    Row("a smaller id committing after the head passed its gap (late arrival, F6)",
        "processed late; rewinds nothing: state as the in-order reference", late_smaller_ids),
    Row("two installations on one mailbox", "second exits at once naming the holder; first as reference",
        two_installations),
    Row("host clock stepped back 1 h during a gap grace", "grace ends on time (no stall)", clock_stepped_back),
    Row("host clock stepped forward 1 h inside a gap grace", "grace not cut short; row in order",
        clock_stepped_forward),
    Row("host clock stepped forward 1 h, then back 2 h, while a request waits for its answer (faketime)",
        "times out 30 s after sending by PostgreSQL's clock, never early nor late; sent once; the 22:00 job's day "
        "is PostgreSQL's tomorrow", clock_stepped_during_requests),
]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    servers, stop = start_private_servers(tmp_path_factory.mktemp("servers"))
    try:
        yield Lab(servers, tmp_path_factory.mktemp("installs"))
    finally:
        stop()


@pytest.fixture(scope="module")
def reference(lab) -> dict:
    """The in-order run: the same workload, no fault, no Redis."""
    inst = lab.install(redis=False)
    fill(inst.mailbox_url, workload())
    done = inst.pump()
    assert done.returncode == 0, done.stderr[-2000:]
    ref = outcome(inst.db_url, inst.mailbox_url)
    assert len(ref["statuses"]) == N and ref["unmarked"] == 0
    assert {s for _, s, _, _ in ref["statuses"]} == {"SUCCEEDED", "SKIPPED", "DEAD"}
    return ref


@pytest.mark.parametrize("row", MATRIX, ids=[r.fault for r in MATRIX])
def test_fault_matrix(row: Row, lab: Lab, reference: dict) -> None:
    """One row of the matrix (see the module doc and MATRIX)."""
    observed = row.run(lab, reference)
    print(f"\n| {row.fault} | {row.expected} | {observed} |", file=sys.stderr)
