"""The Dagster daemon stopped for ten minutes while rows arrive, under the shipped topology: what is
left when it comes back, and how long the catch-up takes (docs/faults.md, docs/benchmarks.md).

The stack is ``bench_latency.py --mode topology``'s: the code server and the daemon of ``deploy/``
as processes on loopback (compose's commands, the instance ``deploy/dagster.yaml`` with Dagster's
storage in a throwaway PostgreSQL database, ``deploy/workspace.yaml`` at the code server's port),
fresh msgx databases, a MariaDB mailbox and fresh topics on the machine's Kafka-wire broker
(MSGX_TEST_KAFKA, default 127.0.0.1:9092). GTDT rows arrive at ``--rate`` a second from the
start until the daemon is back.

1. The inbox sensor starts a pump run; it processes the rows for ``--before`` seconds.
2. The daemon is stopped as ``systemctl stop`` stops it (SIGTERM to its process group, waited for)
   and stays away ``--away`` seconds (600). The running pump goes on without it.
3. ``--pump-ends-after`` seconds into the absence (half of it by default) the pump's run worker is
   given SIGTERM (a run that ends while the daemon is away): from then on no pump runs (no sensor
   ticks, no queued run is dequeued) and the rows wait in the mailbox.
4. The daemon is started again (its own command, environment and folder) and the rows stop. The
   run measures the time from that start to the first new pump holding the writer lock, and to the
   backlog drained (every row terminal, every mailbox row marked, the outbox delivered).
5. The same rows, in the same order, into a fresh mailbox and state processed by one ``msgx pump
   --drain`` (the clean replay): the run's end state is compared with it as the fault matrix
   compares its rows (``as_reference``: nothing lost, doubled or rewound), each mailbox mark
   written once (the matrix's mark trigger), each event's record on the topic (once for a
   consumer that dedupes by ``event_id``; repeats are counted).

Usage: ``.venv/bin/python bench/bench_daemon_away.py [--away 600] [--rate 2] [--before 30]
[--pump-ends-after S]``: about ``--away`` plus 3 to 5 minutes. Not a test: no timing is asserted;
it exits 1 when the comparison fails or the backlog does not drain within ``--drain-timeout``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import dagster as dg
import psutil
import psycopg
from confluent_kafka.admin import AdminClient, NewTopic
from sqlalchemy import text

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO))

from bench_latency import KAFKA, shipped_topology, start, stop, unsent  # noqa: E402
from bench_pump import PG, TAG, drop, mysql_db, pg_db  # noqa: E402
from builders import gtdt  # noqa: E402

from msgx_engine.db import make_engine  # noqa: E402
from msgx_engine.mailbox.adapter import Mailbox  # noqa: E402
from msgx_engine.store import locks, monitoring  # noqa: E402
from tests.conftest import read_topic  # noqa: E402
from tests.e2e.test_fault_matrix import MARK_LOG, as_reference, fill  # noqa: E402
from tests.e2e.test_pipeline_crash import outcome  # noqa: E402

BIN = Path(sys.executable).parent
FLIGHTS = 40


def body(i: int) -> str:
    """Row ``i``: a GTDT for one of FLIGHTS flights, its own SEQN (no repeats)."""
    return gtdt(f"DA{i % FLIGHTS:02d}", (1, f"G{i % 13}"), (2, f"H{i % 7}"), seqn=700000 + i)


class Feeder(threading.Thread):
    """Puts ``body(i)`` into the mailbox at ``rate`` a second until stopped; notes each put's time."""

    def __init__(self, mailbox_url: str, rate: float) -> None:
        super().__init__(daemon=True)
        self.mailbox, self.rate = Mailbox(mailbox_url), rate
        self.bodies: list[str] = []
        self.at: list[float] = []
        self.halt = threading.Event()

    def run(self) -> None:
        t0 = time.monotonic()
        while not self.halt.is_set():
            pause = t0 + len(self.bodies) / self.rate - time.monotonic()
            if pause > 0 and self.halt.wait(pause):
                break
            b = body(len(self.bodies))
            self.mailbox.put(b)
            self.bodies.append(b)
            self.at.append(time.monotonic())

    def arrived_between(self, start: float, end: float) -> int:
        return sum(1 for t in self.at if start <= t < end)


class State:
    """msgx's state database, looked at the way the topology tests look at it."""

    def __init__(self, url: str, mailbox_url: str) -> None:
        self.engine, self.mailbox = make_engine(url), Mailbox(mailbox_url)

    def lock_held(self) -> bool:
        with self.engine.connect() as conn:
            return monitoring.advisory_lock_held(conn, locks.PUMP)

    def pump_pid(self) -> int | None:
        with self.engine.connect() as conn:
            beat = next((b for b in monitoring.heartbeats(conn) if b.component == monitoring.PUMP), None)
        return beat.pid if beat is not None else None

    def terminal(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM proc_state "
                                         "WHERE status IN ('SUCCEEDED', 'SKIPPED', 'DEAD')")).scalar_one())

    def unmarked(self) -> int:
        with self.mailbox.engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM cminmsgs "
                                         "WHERE CMINMSGS_DATE_PROCESSED IS NULL")).scalar_one())

    def drained(self, rows: int) -> bool:
        return self.terminal() == rows and self.unmarked() == 0 and unsent(self.engine) == 0

    def dispose(self) -> None:
        self.engine.dispose()
        self.mailbox.dispose()


def until(what: str, probe, timeout_s: float, procs: list[subprocess.Popen]) -> float:
    """Poll ``probe`` every 0.5 s until it is true: the monotonic time it was; SystemExit at the
    deadline or when one of ``procs`` has exited."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        for p in procs:
            if p.poll() is not None:
                raise SystemExit(f"{p.args[0]} exited with {p.returncode} while waiting for {what}")
        if probe():
            return time.monotonic()
        time.sleep(0.5)
    raise SystemExit(f"not within {timeout_s:.0f} s: {what}")


def pump_runs_started(home: Path, after: float, before: float) -> list[str]:
    """The pump runs Dagster's storage says started between the wall times ``after`` and ``before``."""
    with dg.DagsterInstance.from_config(str(home)) as instance:
        records = instance.get_run_records(dg.RunsFilter(job_name="pump_job"))
    return [r.dagster_run.run_id for r in records if r.start_time is not None and after < r.start_time < before]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--away", type=float, default=600.0, help="seconds the daemon stays stopped")
    ap.add_argument("--rate", type=float, default=2.0, help="rows a second into the mailbox")
    ap.add_argument("--before", type=float, default=30.0, help="seconds of rows before the daemon stops")
    ap.add_argument("--pump-ends-after", type=float, help="seconds into the absence the pump run is ended "
                    "(SIGTERM to its run worker); default half of --away")
    ap.add_argument("--drain-timeout", type=float, default=600.0)
    args = ap.parse_args()
    pump_ends_after = args.away / 2 if args.pump_ends_after is None else args.pump_ends_after

    names = [f"{TAG}_state", f"{TAG}_ref"]
    dagster_db, ref_mailbox_name = f"{TAG}_dagster", f"{TAG}_ref"
    topic_msg, topic_schd = f"bench_msg_{TAG}", f"bench_schd_{TAG}"
    AdminClient({"bootstrap.servers": KAFKA}).create_topics([NewTopic(topic_msg, 4, 1), NewTopic(topic_schd, 4, 1)])
    work = Path(tempfile.mkdtemp(prefix="msgx-bench-daemon-away-"))
    procs: list[subprocess.Popen] = []
    feeder: Feeder | None = None
    state: State | None = None
    try:
        state_url, ref_url = pg_db(names[0]), pg_db(names[1])
        mailbox_url, ref_mailbox_url = mysql_db(TAG), mysql_db(ref_mailbox_name)
        marks = Mailbox(mailbox_url)
        with marks.engine.connect() as conn:           # the matrix's trigger: every write of a mark logged
            for statement in MARK_LOG:
                conn.execute(text(statement))
        with psycopg.connect(PG, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{dagster_db}"')
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MSGX_", "DAGSTER_"))}
        env.update(MSGX_DB_URL=state_url, MSGX_MAILBOX_URL=mailbox_url, MSGX_KAFKA_BOOTSTRAP=KAFKA,
                   MSGX_TOPIC_MSG=topic_msg, MSGX_TOPIC_SCHD=topic_schd, MSGX_HOME=str(work / "home"))
        procs += shipped_topology(env, work, dagster_db)
        codeserver, daemon = procs
        daemon_env = psutil.Process(daemon.pid).environ()      # its own, to start it again as it was
        os.environ.update({k: v for k, v in daemon_env.items() if k.startswith("DAGSTER_")})
        home = Path(daemon_env["DAGSTER_HOME"])
        state = State(state_url, mailbox_url)

        feeder = Feeder(mailbox_url, args.rate)
        feeder.start()
        until("a pump run holds the writer lock", state.lock_held, 300, procs)
        print(f"pump running (pid {state.pump_pid()}); rows at {args.rate:g}/s", flush=True)
        time.sleep(args.before)

        os.killpg(daemon.pid, signal.SIGTERM)
        daemon.wait(60)
        procs.remove(daemon)
        away_at = time.monotonic()
        away_wall = time.time()
        print(f"daemon stopped (exit {daemon.returncode}) after {args.before:.0f} s; away {args.away:.0f} s",
              flush=True)
        time.sleep(pump_ends_after)
        pump = state.pump_pid()
        done_before_end = state.terminal()
        if pump is not None and psutil.pid_exists(pump):
            os.kill(pump, signal.SIGTERM)
        ended_at = until("the pump run to end", lambda: not state.lock_held(), 120, procs)
        processed_at_end = state.terminal()
        print(f"pump run worker (pid {pump}) given SIGTERM {pump_ends_after:.0f} s into the absence; "
              f"lock released {ended_at - away_at - pump_ends_after:.1f} s later, {processed_at_end} rows "
              f"terminal", flush=True)
        rest = away_at + args.away - time.monotonic()
        held_after_end = 0
        while rest > 0:
            time.sleep(min(rest, 5.0))
            held_after_end += state.lock_held()
            rest = away_at + args.away - time.monotonic()
        waiting = len(feeder.bodies) - state.terminal()

        started_at, started_wall = time.monotonic(), time.time()
        procs.append(start(list(daemon.args), daemon_env, work / "daemon-again.log"))
        feeder.halt.set()
        feeder.join(30)
        rows = len(feeder.bodies)
        arrived = feeder.arrived_between(away_at, started_at)
        arrived_no_pump = feeder.arrived_between(ended_at, started_at)
        runs_while_away = pump_runs_started(home, away_wall, started_wall)
        old_pid = pump

        first = until("a new pump holds the writer lock",
                      lambda: state.lock_held() and state.pump_pid() not in (None, old_pid), 300, procs)
        drained = until("the backlog drained", lambda: state.drained(rows), args.drain_timeout, procs)
        print(f"daemon started again; first new pump run holds the lock after {first - started_at:.1f} s; "
              f"backlog of {waiting} rows drained after {drained - started_at:.1f} s", flush=True)
        for proc in procs:
            stop(proc)
        procs.clear()

        fill(ref_mailbox_url, feeder.bodies)          # the clean replay: the same rows, in order, one drain
        replay = subprocess.run([str(BIN / "msgx"), "pump", "--drain"], capture_output=True, text=True, timeout=900,
                                env={**{k: v for k, v in os.environ.items() if not k.startswith("MSGX_")},
                                     "MSGX_DB_URL": ref_url, "MSGX_MAILBOX_URL": ref_mailbox_url,
                                     "MSGX_HOME": str(work / "ref-home")})
        if replay.returncode != 0:
            raise SystemExit(f"the clean replay failed: {replay.stderr[-2000:]}")
        got, reference = outcome(state_url, mailbox_url), outcome(ref_url, ref_mailbox_url)
        as_reference(got, reference, n=rows)
        with marks.engine.connect() as conn:
            writes = Counter(r[0] for r in conn.execute(text("SELECT id FROM mark_log")))
        marks.dispose()
        assert len(writes) == rows and set(writes.values()) == {1}, f"marks written {set(writes.values())} times"
        with state.engine.connect() as conn:
            events = {int(r[0]) for r in conn.execute(text("SELECT event_id FROM msg_event WHERE topic = 'msg'"))}
        records = read_topic(KAFKA, topic_msg, len(events), timeout_s=120)
        delivered = Counter(int(r.headers["event_id"]) for r in records)
        assert set(delivered) == events, "an event missing from the topic, or one the outbox does not know"
        repeats = sum(n - 1 for n in delivered.values())

        print(f"daemon away {args.away:.0f} s at {args.rate:g} rows/s: {arrived} rows arrived while it was away, "
              f"{arrived_no_pump} of them after the pump run ended ({processed_at_end - done_before_end} processed "
              f"between the {pump_ends_after:.0f} s mark and the run's end); pump runs started while away: "
              f"{len(runs_while_away)}; writer lock seen held {held_after_end} time(s) after the run ended")
        print(f"first new pump run {first - started_at:.1f} s after the daemon's start; backlog ({waiting} rows) "
              f"drained {drained - started_at:.1f} s after it")
        print(f"against the clean replay of {rows} rows: nothing lost, doubled or rewound; every mark written "
              f"once; {len(events)} msg events on the topic, {repeats} repeated delivery(ies)")
        print(f"RESULT daemon_away_first_pump_s\t{first - started_at:.1f}\t-\t-\ts\t-")
        print(f"RESULT daemon_away_drained_s\t{drained - started_at:.1f}\t-\t-\ts\t-", flush=True)
        return 0
    except AssertionError as e:
        print(f"FAILED against the clean replay: {e}; logs in {work}", file=sys.stderr)
        return 1
    finally:
        if feeder is not None:
            feeder.halt.set()
            feeder.mailbox.dispose()
        for proc in procs:
            stop(proc)
        if state is not None:
            state.dispose()
        drop([*names, dagster_db], TAG)
        drop([], ref_mailbox_name)


if __name__ == "__main__":
    sys.exit(main())
