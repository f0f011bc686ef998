"""Soak: msgx on the real stack over a long stream, figures per tenth of the run (flat or growing).

The stack: fresh PostgreSQL and MariaDB mailbox databases, the Kafka-wire broker (``MSGX_TEST_KAFKA``,
default 127.0.0.1:9092, two fresh topics), a private redis-server for the projection, and the
production processes without Dagster: a long-lived ``msgx pump`` and a long-lived dispatcher
(what ``dispatch_job`` runs); with ``--dagster``, ``dagster dev`` with the msgx code location
instead, whose inbox sensor starts the pump run (its dispatcher a thread inside it,
``soak_dagster.py``). The stream is demo days one after another (``soak_stream.py``: the day's
reference packages, its SCHD DNLD of 241 flights, the FLOP subtypes, a RESP, malformed bodies and
repeats), each brought to ``--day-messages`` (100,000) with the AODB's revisions. A feeder inserts
it into the mailbox in small commits, keeping at most ``--ahead`` messages not yet terminal (so the
pump always has work and its rate is what is measured), or at ``--rate`` messages a second. Every
``--archive-every`` messages (a simulated day by default) this process runs the archiving run's
work (``Archiver.run``, what ``archive_job`` does nightly) with the retention and identity window
compressed to ``--retain-days`` simulated days: the time since that day's first message was
inserted.

Per tenth of the run (by messages terminal, the first tenth being warm-up): throughput, p50/p99 of
mailbox insert -> terminal status and of terminal status -> Kafka acknowledgement (``sent_at``),
the pump's CPU seconds per 1,000 messages (its process tree: the pump and its offload helper),
its RSS, and the size of msgx's tables. Then one line per figure comparing the last tenth with the
second, every table's and index's size, bytes per live row, and each table's updates, HOT updates
and dead rows (``pg_stat_user_tables``).

``--outage-hours H``: catch-up after an outage of the mailbox or of PostgreSQL. H hours of a
``--day-messages`` day at the demo's mix are in the mailbox when msgx starts (generated, not waited
for), while new traffic arrives at ``--peak-rate``; prints when the backlog was drained and what
the new traffic waited meanwhile.

``--shape churn --flights F``: instead of airport days, FLOP/GTDT messages (one to three gates, a
different set each round) round after round over F flights (3,000): each flight changes every F
messages, about a hundred times in a 300,000-message backlog, as in a busy day compressed or a long
outage's catch-up; its detail rows, events and queue entries are rewritten while the pump runs.

``--statements``: a private PostgreSQL cluster loading ``pg_stat_statements`` (autovacuum off, as on
the shared server; with ``--private-pg`` on); the report adds the statements whose time per message
grew most from the second tenth to the ninth, with their calls and buffers per call.

``--backlog N --no-delivery``: N messages are in the mailbox before the pump starts (``msgx pump
--drain``) and no dispatcher runs, as in a delivery outage: every event stays in the outbox. The
latency is then the pump's step (from its previous commit to the one that made a message
terminal): every message of a backlog waited since the start.

``--then-latency K``: after the run, on the same databases, K runs of ``bench_latency.py`` under
``dagster dev`` (``soak_latency.py``): after a backlog drained with delivery down, the first run's
warm-up delivers the outbox, and each run says whether p99 <= 300 ms at 250 msg/s held.

``--stored-flights N``: once the first day's flights are stored, they are copied into earlier days
until the store holds N (``soak_history.py``; a year at an airport is about 400,000), so what
reads more as the store grows shows in the tenths.

The pages each per-pass statement touches (queue head, open count, marks due, unsent events) are
printed per tenth too: they grow when the partial indexes those statements read from their start
keep the entries of rows that left them, which only VACUUM removes.

``--private-pg``: a private PostgreSQL cluster with autovacuum on (a production server's default;
the shared server of these machines runs with it off). ``--without-upkeep``: the tables' storage
parameters (fill factors, autovacuum thresholds) reset to PostgreSQL's defaults, to compare.
``--vacuum-every S``: a ``VACUUM (ANALYZE)`` every S seconds from another session instead.

Usage: ``.venv/bin/python bench/bench_soak.py [--messages 1000000] [--day-messages 100000]
[--ahead 1000] [--rate R] [--archive-every N] [--retain-days 2] [--stored-flights N] [--backlog N]
[--no-delivery] [--then-latency K] [--outage-hours H --peak-rate R --after-s 180] [--dagster] [--private-pg]
[--without-upkeep] [--vacuum-every S] [--shape churn --flights 3000] [--statements]``.
Sized for 1,000,000 messages in under an hour at 280
msg/s or more; develop with ``--messages 20000 --day-messages 8000``. Not a test: nothing asserts
a timing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, timedelta
from itertools import islice
from pathlib import Path
from typing import Any, Protocol

import psycopg
import pymysql
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_pump  # noqa: E402
from bench_latency import BIN, KAFKA, free_port, start, stop  # noqa: E402
from bench_pump import MYSQL_HOST, MYSQL_PORT, fresh_databases  # noqa: E402
from private_servers import PrivatePostgres, private_postgres_root  # noqa: E402
from proctree import rss_mb, tree_cpu_seconds  # noqa: E402
from soak_dagster import DagsterStack  # noqa: E402
from soak_history import store_history  # noqa: E402
from soak_latency import latency_runs, print_runs  # noqa: E402
from soak_stream import StreamMessage, churn, stream  # noqa: E402

from msgx_engine.clock import SystemClock  # noqa: E402
from msgx_engine.db import make_engine  # noqa: E402
from msgx_engine.mailbox.tables import cminmsgs  # noqa: E402
from msgx_engine.operations.archive import ArchivePolicy, Archiver  # noqa: E402
from msgx_engine.store.metric_totals import MESSAGES_TERMINAL  # noqa: E402
from msgx_engine.store.status import OPEN, sql_in  # noqa: E402

TENTHS = 10


# --- PostgreSQL figures ------------------------------------------------------------------------------
_SIZES_SQL = ("SELECT c.relname, c.relkind, CASE WHEN c.relkind = 'r' THEN pg_table_size(c.oid) "
              "ELSE pg_relation_size(c.oid) END, coalesce(t.relname, c.relname) "
              "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
              "LEFT JOIN pg_index i ON i.indexrelid = c.oid LEFT JOIN pg_class t ON t.oid = i.indrelid "
              "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i') AND c.relname <> 'alembic_version'")
_STATS_SQL = ("SELECT relname, n_live_tup, n_dead_tup, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, "
              "vacuum_count + autovacuum_count FROM pg_stat_user_tables WHERE schemaname = 'public'")
# The pump's and the dispatcher's statements that run on every pass, as plain reads (no row locks):
# the pages each one touches, per tenth, show which of them grows with the run.
_OPEN = f"status IN {sql_in(OPEN)}"
PROBES = {
    "queue head": f"SELECT msg_id FROM proc_state WHERE {_OPEN} ORDER BY msg_id LIMIT 64",
    "open count": f"SELECT count(*) FROM proc_state WHERE {_OPEN}",
    "marks due": "SELECT msg_id FROM backfill_todo WHERE status = 'PENDING' ORDER BY msg_id LIMIT 500",
    "unsent events": "SELECT event_id FROM msg_event WHERE topic = 'msg' AND released_at IS NOT NULL "
                     "AND sent_at IS NULL AND dead_at IS NULL ORDER BY event_id LIMIT 500",
}
_PROGRESS_SQL = f"SELECT coalesce(sum(value), 0) FROM metric_total WHERE name = '{MESSAGES_TERMINAL}'"


def sizes(conn: psycopg.Connection) -> dict[str, tuple[str, int, str]]:
    """relation -> (kind 'r'/'i', bytes, its table)."""
    return {name: (kind, size, table) for name, kind, size, table in conn.execute(_SIZES_SQL)}


def table_totals(rel: dict[str, tuple[str, int, str]]) -> dict[str, int]:
    """Each table's bytes with its indexes."""
    out: dict[str, int] = {}
    for _kind, size, table in rel.values():
        out[table] = out.get(table, 0) + size
    return out


def scalar(conn: psycopg.Connection, sql: str) -> Any:
    row = conn.execute(sql).fetchone()
    assert row is not None
    return row[0]


def probe(conn: psycopg.Connection) -> dict[str, tuple[int, float]]:
    """Each probe's shared buffers touched and execution ms (EXPLAIN ANALYZE)."""
    out = {}
    for name, sql in PROBES.items():
        plan = scalar(conn, f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}")[0]
        top = plan["Plan"]
        out[name] = (top["Shared Hit Blocks"] + top["Shared Read Blocks"], plan["Execution Time"])
    return out


@dataclass
class Sample:
    """What was read as a tenth of the run ended."""

    at: float
    done: int
    cpu_s: float
    rss_mb: float
    rel: dict[str, tuple[str, int, str]]
    probes: dict[str, tuple[int, float]]
    statements: dict[str, tuple[int, float, int]] = field(default_factory=dict)


class Pump(Protocol):
    """What the soak reads of the pump, whichever way it runs."""

    def ready(self) -> None: ...            # returns once the pump is working (messages are waiting)

    def cpu_seconds(self) -> float: ...     # the pump's CPU so far (its process tree)

    def rss_mb(self) -> float: ...

    def exited(self) -> int | None: ...     # its exit status once it is gone for good


@dataclass
class EnginePump:
    """``msgx pump`` as a process of its own (the dispatcher is another)."""

    proc: subprocess.Popen

    def ready(self) -> None:
        pass

    def cpu_seconds(self) -> float:
        return tree_cpu_seconds(self.proc.pid)

    def rss_mb(self) -> float:
        return rss_mb(self.proc.pid)

    def exited(self) -> int | None:
        return self.proc.poll()


@dataclass
class DagsterPump:
    """The pump as the run the inbox sensor starts under ``dagster dev`` (``soak_dagster.py``), its
    dispatcher a thread inside it; a run that ends is followed to the next one."""

    stack: DagsterStack

    def ready(self) -> None:
        self.stack.pump_pid()

    def cpu_seconds(self) -> float:
        return self.stack.cpu_seconds()

    def rss_mb(self) -> float:
        return rss_mb(self.stack.pump_pid())

    def exited(self) -> int | None:
        return self.stack.poll()


_STATEMENTS_SQL = ("SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 110), sum(calls)::bigint, "
                   "sum(total_exec_time), sum(shared_blks_hit + shared_blks_read)::bigint FROM pg_stat_statements "
                   "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) GROUP BY 1")


def statements(conn: psycopg.Connection) -> dict[str, tuple[int, float, int]]:
    """pg_stat_statements' totals per statement (calls, ms, buffers), when the server loads it."""
    try:
        return {q: (c, t, b) for q, c, t, b in conn.execute(_STATEMENTS_SQL)}
    except psycopg.errors.UndefinedTable:
        return {}


def sample(conn: psycopg.Connection, done: int, pump: Pump) -> Sample:
    return Sample(time.time(), done, pump.cpu_seconds(), pump.rss_mb(), sizes(conn), probe(conn), statements(conn))


@dataclass(eq=False)
class Feeder(threading.Thread):
    """Inserts the stream into the mailbox in commits of ``chunk``, recording when each id's commit
    returned; keeps at most ``ahead`` messages not yet terminal, or paces at ``rate``."""

    messages: Iterator[StreamMessage]
    total: int
    db: str
    ahead: int
    rate: float = 0.0
    chunk: int = 20
    inserted: dict[int, float] = field(default_factory=dict)
    day_started: dict[int, float] = field(default_factory=dict)
    done: int = 0                 # messages terminal, as the main loop last read it
    error: BaseException | None = None
    stop_flag: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        super().__init__(daemon=True)

    def insert(self, batch: list[StreamMessage]) -> None:
        with pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root", database=self.db,
                             autocommit=True) as conn:
            self._insert(conn, batch)

    def _insert(self, conn: pymysql.Connection, batch: list[StreamMessage]) -> None:
        for m in batch:
            self.day_started.setdefault(m.day, time.time())
        with conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {cminmsgs.name} (CMINMSGS_CLOB_MSG, CMINMSGS_DATE_RECEIVED, CMINMSGS_STATUS) "
                            "VALUES (%s, now(), 'VALID')", [m.body for m in batch])
            # the only writer of this mailbox: its rows took the ids just below the largest (pymysql
            # splits a long executemany into several statements, so lastrowid is only the last one's)
            cur.execute(f"SELECT max(CMINMSGS_ID) FROM {cminmsgs.name}")
            first = cur.fetchone()[0] - len(batch) + 1
        now = time.time()
        for i in range(len(batch)):
            self.inserted[first + i] = now

    def run(self) -> None:
        try:
            self._feed()
        except BaseException as exc:      # the main loop stops the run with it
            self.error = exc
            raise

    def _feed(self) -> None:
        with pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root", database=self.db,
                             autocommit=True) as conn:
            t0 = time.monotonic()
            start = sent = len(self.inserted)
            while sent < self.total and not self.stop_flag.is_set():
                if self.rate > 0:
                    pause = t0 + (sent - start) / self.rate - time.monotonic()
                    if pause > 0:
                        time.sleep(pause)
                    n = 1
                else:
                    room = self.ahead - (len(self.inserted) - self.done)
                    if room < self.chunk:
                        time.sleep(0.01)
                        continue
                    n = self.chunk
                batch = list(islice(self.messages, min(n, self.total - sent)))
                self._insert(conn, batch)
                sent += len(batch)


# --- the run -------------------------------------------------------------------------------------------
def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--ahead", type=int, default=1000, help="messages inserted but not yet terminal, at most")
    ap.add_argument("--rate", type=float, default=0.0, help="insert at this many msg/s instead (0: --ahead)")
    ap.add_argument("--day-messages", type=int, default=100_000,
                    help="messages in a simulated day: the demo day and its revisions (soak_stream.py)")
    ap.add_argument("--shape", choices=("day", "churn"), default="day",
                    help="day: demo airport days with revisions; churn: GTDT rounds over --flights flights")
    ap.add_argument("--flights", type=int, default=3000, help="the churn shape's flights")
    ap.add_argument("--archive-every", type=int, default=0, help="messages between archiving runs (default: a day)")
    ap.add_argument("--stored-flights", type=int, default=0,
                    help="copy the first day's flights into earlier days until the store holds this many "
                         "(a year at an airport: 400000) before the run is measured (soak_history.py)")
    ap.add_argument("--retain-days", type=int, default=2, help="simulated days archiving keeps")
    ap.add_argument("--backlog", type=int, default=0, help="insert this many first, then drain them")
    ap.add_argument("--outage-hours", type=float, default=0.0,
                    help="catch-up: this many hours of a --day-messages day wait in the mailbox when msgx starts, "
                         "while new traffic arrives at --peak-rate for --after-s seconds")
    ap.add_argument("--peak-rate", type=float, default=0.0, help="msg/s of new traffic (default: 5x the day's mean)")
    ap.add_argument("--after-s", type=float, default=180.0)
    ap.add_argument("--no-delivery", action="store_true", help="no dispatcher: events stay in the outbox")
    ap.add_argument("--then-latency", type=int, default=0, metavar="K",
                    help="after the run, K runs of bench_latency.py under dagster dev on its databases "
                         "(after a --backlog: the latency target once the outbox is delivered)")
    ap.add_argument("--dagster", action="store_true",
                    help="the pump as the run the inbox sensor starts under dagster dev, its dispatcher inside it")
    ap.add_argument("--vacuum-every", type=float, default=0.0, help="VACUUM (ANALYZE) every S seconds")
    ap.add_argument("--private-pg", action="store_true",
                    help="a private PostgreSQL cluster with autovacuum on (the default a production server runs)")
    ap.add_argument("--statements", action="store_true",
                    help="a private cluster loading pg_stat_statements, autovacuum off as on the shared server "
                         "(with --private-pg: on); prints the statements whose time grew from the 2nd to the 9th tenth")
    ap.add_argument("--without-upkeep", action="store_true",
                    help="reset the tables' storage parameters (fill factors, autovacuum thresholds) to the defaults")
    args = ap.parse_args()
    args.pre = args.backlog
    args.archive_every = args.archive_every or args.day_messages
    if args.backlog:
        args.messages = args.backlog
    elif args.outage_hours:
        args.pre = int(args.outage_hours / 24 * args.day_messages)
        args.rate = args.peak_rate or 5 * args.day_messages / 86400
        args.messages = args.pre + int(args.rate * args.after_s)
    return args


class Vacuumer(threading.Thread):
    """``VACUUM (ANALYZE)`` of the database every ``every_s``: autovacuum's work, on time."""

    def __init__(self, dsn: str, every_s: float) -> None:
        super().__init__(daemon=True)
        self.dsn, self.every_s, self.stop_flag, self.runs = dsn, every_s, threading.Event(), 0

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop_flag.wait(self.every_s):
                conn.execute("VACUUM (ANALYZE, SKIP_LOCKED)")
                self.runs += 1


def main() -> int:
    args = parse()
    if not (args.private_pg or args.statements):
        return soak(args)
    root = private_postgres_root()
    settings = {"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.track": "all",
                "autovacuum": "on" if args.private_pg else "off"} if args.statements else {}
    cluster = PrivatePostgres(root / "pg", settings=settings)
    cluster.ctl("start")
    try:
        bench_pump.PG = cluster.url().replace("postgresql+psycopg://", "postgresql://")
        print(f"a private PostgreSQL cluster with autovacuum {settings.get('autovacuum', 'on')}, "
              f"port {cluster.port}", flush=True)
        return soak(args)
    finally:
        cluster.ctl("stop")
        shutil.rmtree(root, ignore_errors=True)


def reset_storage(dsn: str) -> None:
    """Every table's storage parameters back to PostgreSQL's defaults (but ``metric_total``'s fill
    factor, which 0014 set): the schema as it was before the upkeep migration, to compare with (the
    migration's revision stays, so msgx runs)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT relname, reloptions FROM pg_class c JOIN pg_namespace n ON n.oid = "
                            "c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r' AND reloptions IS NOT NULL")
        for table, options in rows.fetchall():
            names = [o.split("=", 1)[0] for o in options]
            names = [n for n in names if (table, n) != ("metric_total", "fillfactor")]     # 0014's
            if names:
                conn.execute(f"ALTER TABLE {table} RESET ({', '.join(names)})")


def soak(args: argparse.Namespace) -> int:
    tag = f"msgx_soak_{uuid.uuid4().hex[:6]}"
    work = Path(tempfile.mkdtemp(prefix="msgx-bench-soak-"))
    topics = f"soak_msg_{tag}", f"soak_schd_{tag}"
    with fresh_databases(tag, "p") as ((db_url,), mailbox_url):
        dsn = db_url.replace("postgresql+psycopg://", "postgresql://")
        if args.statements:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        if args.without_upkeep:
            reset_storage(dsn)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MSGX_")}
        redis_port = free_port()
        env.update(MSGX_DB_URL=db_url, MSGX_MAILBOX_URL=mailbox_url, MSGX_HOME=str(work / "home"),
                   MSGX_REDIS_URL=f"redis://127.0.0.1:{redis_port}/0", MSGX_TOPIC_MSG=topics[0],
                   MSGX_TOPIC_SCHD=topics[1])
        if not args.no_delivery:
            AdminClient({"bootstrap.servers": KAFKA}).create_topics([NewTopic(t, 4, 1) for t in topics])
            env["MSGX_KAFKA_BOOTSTRAP"] = KAFKA
        messages = churn(args.flights) if args.shape == "churn" else stream(date.today(), args.day_messages)
        feeder = Feeder(messages, args.messages, tag, args.ahead, args.rate)
        if args.pre:
            t = time.monotonic()
            while len(feeder.inserted) < args.pre:
                feeder.insert(list(islice(feeder.messages, min(1000, args.pre - len(feeder.inserted)))))
            print(f"backlog of {args.pre} messages inserted in {time.monotonic() - t:.0f} s", flush=True)
        procs = [start(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                        "--appendonly", "no"], env, work / "redis.log")]
        stack: DagsterStack | None = None
        try:
            pump: Pump
            if args.dagster:
                stack = DagsterStack(env, work).start()
                started, pump = time.time(), DagsterPump(stack)
            else:
                pump, started = start_engine(args, env, work, procs), time.time()
            samples = drive(args, feeder, pump, db_url, dsn)
            lat = latencies(dsn, feeder.inserted, args.no_delivery)
            with psycopg.connect(dsn) as conn:
                stats = conn.execute(_STATS_SQL).fetchall()
        finally:
            feeder.stop_flag.set()
            if stack is not None:
                stack.stop()
            for p in reversed(procs):
                stop(p)
        report(args, samples, feeder.inserted, lat, stats)
        if args.outage_hours:
            catch_up(args, started, feeder.inserted, lat)
        if args.then_latency:
            print(f"\n{args.then_latency} runs of bench_latency.py under dagster dev on these databases:", flush=True)
            print_runs(latency_runs(db_url, mailbox_url, args.then_latency))
    print(f"logs in {work}")
    return 0


def start_engine(args: argparse.Namespace, env: dict[str, str], work: Path, procs: list[subprocess.Popen]) -> Pump:
    """``msgx pump`` and, with delivery on, a dispatcher (what ``dispatch_job`` runs), long-lived."""
    long = str(24 * 3600)
    pump_argv = [str(BIN / "msgx"), "pump", "--max-runtime", long]
    pump_argv += ["--drain"] if args.backlog else ["--idle-for", long]
    procs.append(start(pump_argv, env, work / "pump.log"))
    pump = EnginePump(procs[-1])
    if not args.no_delivery:
        procs.append(start([sys.executable, "-c", "from msgx_engine.config import Settings;"
                            "from msgx_engine.delivery.runner import run_dispatch;"
                            f"run_dispatch(Settings.from_env(), drain=False, run_for_s={long})"],
                           env, work / "dispatch.log"))
    return pump


def drive(args: argparse.Namespace, feeder: Feeder, pump: Pump, db_url: str, dsn: str) -> list[Sample]:
    """Feed, archive and sample until every message is terminal: a sample at each tenth."""
    engine = make_engine(db_url)
    archiver = Archiver(engine, SystemClock())
    vacuumer = Vacuumer(dsn, args.vacuum_every) if args.vacuum_every else None
    n = args.messages
    samples: list[Sample] = []
    next_archive = args.archive_every
    history = args.stored_flights
    with psycopg.connect(dsn, autocommit=True) as conn:
        if len(feeder.inserted) < feeder.total:
            feeder.start()
        pump.ready()
        samples.append(sample(conn, 0, pump))
        if vacuumer:
            vacuumer.start()
        while len(samples) <= TENTHS:
            done = int(scalar(conn, _PROGRESS_SQL))
            feeder.done = done
            if done >= min(n, len(samples) * n // TENTHS):
                samples.append(sample(conn, done, pump))
                s = samples[-1]
                if not s.rss_mb:              # a drain's pump has exited by its last sample
                    s.rss_mb, s.cpu_s = samples[-2].rss_mb, max(s.cpu_s, samples[-2].cpu_s)
                print(f"tenth {len(samples) - 1}: {done} terminal, {time.strftime('%H:%M:%S')}, "
                      f"RSS {s.rss_mb:.0f} MB, tables {sum(x[1] for x in s.rel.values()) / 2**20:.0f} MB",
                      flush=True)
                continue
            if history and scalar(conn, "SELECT count(*) >= 200 FROM flight_schd"):
                stored, took = store_history(dsn, history)
                print(f"{stored} flights stored (the first day's copied into earlier days in {took:.0f} s), "
                      f"{time.strftime('%H:%M:%S')}", flush=True)
                history = 0
                continue
            if done >= next_archive and not args.no_delivery:
                archive(archiver, feeder, args)
                next_archive += args.archive_every
                continue
            if feeder.error is not None:
                raise SystemExit(f"the feeder failed: {feeder.error!r}")
            if pump.exited() is not None:
                raise SystemExit(f"the pump exited ({pump.exited()}) after {done} of {n} messages")
            time.sleep(0.5)
    if vacuumer:
        vacuumer.stop_flag.set()
        print(f"VACUUM ran {vacuumer.runs} times")
    if not args.no_delivery:        # every event delivered before the latencies are read
        deadline = time.monotonic() + 120
        with psycopg.connect(dsn, autocommit=True) as conn:
            while time.monotonic() < deadline and scalar(
                    conn, "SELECT count(*) FROM msg_event WHERE sent_at IS NULL AND dead_at IS NULL"):
                time.sleep(0.5)
    engine.dispose()
    return samples


def archive(archiver: Archiver, feeder: Feeder, args: argparse.Namespace) -> None:
    """The nightly archiving run, retention compressed to ``--retain-days`` simulated days."""
    day = max(feeder.day_started) - args.retain_days
    if day < 0 or day not in feeder.day_started:
        return
    keep = timedelta(seconds=time.time() - feeder.day_started[day])
    policy = ArchivePolicy(older_than=keep, identity_window=keep, purge_after=keep)
    archiver.run(policy)


def latencies(dsn: str, inserted: dict[int, float], no_delivery: bool) -> dict[int, tuple[float, float | None]]:
    """mailbox id -> (terminal time, last Kafka acknowledgement of its events or None), archived too."""
    out: dict[int, tuple[float, float | None]] = {}
    with psycopg.connect(dsn) as conn:
        for msg_id, terminal in conn.execute(
                "SELECT msg_id, extract(epoch FROM terminal_at)::float8 FROM proc_state "
                "UNION ALL SELECT msg_id, extract(epoch FROM terminal_at)::float8 FROM proc_state_archive"):
            if msg_id in inserted and terminal is not None:
                out[msg_id] = (terminal, None)
        if not no_delivery:
            for msg_id, sent in conn.execute(
                    "SELECT msg_id, extract(epoch FROM max(sent_at))::float8 FROM (SELECT msg_id, sent_at "
                    "FROM msg_event UNION ALL SELECT msg_id, sent_at FROM msg_event_archive) e GROUP BY msg_id"):
                if msg_id in out and sent is not None:
                    out[msg_id] = (out[msg_id][0], sent)
    return out


# --- the report ------------------------------------------------------------------------------------------
def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))] if values else float("nan")


@dataclass
class Tenth:
    rate: float
    term_p50: float
    term_p99: float
    kafka_p50: float
    kafka_p99: float
    cpu_per_1k: float
    rss_mb: float
    mb: float


def steps(by_terminal: list[tuple[int, tuple[float, float | None]]]) -> dict[int, float]:
    """Each message's step in a drain: from the pump's previous commit to the one that made it
    terminal (in a backlog every message waited since the start, so the wait says nothing)."""
    out: dict[int, float] = {}
    previous = current = by_terminal[0][1][0] if by_terminal else 0.0
    for msg_id, (t, _) in by_terminal:
        if t != current:
            previous, current = current, t
        out[msg_id] = t - previous
    return out


def tenths(samples: list[Sample], inserted: dict[int, float],
           lat: dict[int, tuple[float, float | None]], *, drain: bool = False) -> list[Tenth]:
    """Each tenth's figures: messages by the order they became terminal, CPU and RSS as sampled;
    the latency is mailbox -> terminal, or the pump's step in a ``drain``."""
    by_terminal = sorted(lat.items(), key=lambda kv: kv[1][0])
    step = steps(by_terminal) if drain else {}
    size = max(1, len(by_terminal) // TENTHS)
    out = []
    for k in range(TENTHS):
        part = by_terminal[k * size:(k + 1) * size]
        if len(part) < 2:
            break
        span = part[-1][1][0] - part[0][1][0]
        term = [(step[i] if drain else t - inserted[i]) * 1000 for i, (t, _) in part]
        kafka = [(s - t) * 1000 for _, (t, s) in part if s is not None]
        a, b = samples[k], samples[min(k + 1, len(samples) - 1)]
        cpu = (b.cpu_s - a.cpu_s) / max(1, b.done - a.done) * 1000
        out.append(Tenth(len(part) / span if span > 0 else float("nan"), pct(term, 0.5), pct(term, 0.99),
                         pct(kafka, 0.5), pct(kafka, 0.99), cpu, b.rss_mb,
                         sum(x[1] for x in b.rel.values()) / 2**20))
    return out


def report(args: argparse.Namespace, samples: list[Sample], inserted: dict[int, float],
           lat: dict[int, tuple[float, float | None]], stats: list[tuple]) -> None:
    rows = tenths(samples, inserted, lat, drain=bool(args.backlog))
    mode = (f"backlog of {args.backlog} drained" if args.backlog else
            f"fed {f'at {args.rate:.0f} msg/s' if args.rate else f'{args.ahead} ahead'}")
    print(f"\n{len(lat)} messages, {mode}, delivery {'down' if args.no_delivery else 'on'}, "
          f"archiving every {args.archive_every} keeping {args.retain_days} days, "
          f"{statistics.fmean(r.rate for r in rows):.0f} msg/s over the tenths")
    print(f"{'tenth':>5} {'msg/s':>7} {'step p50' if args.backlog else 'term p50':>9} {'p99 ms':>7} {'kafka p50':>10} "
          f"{'p99 ms':>7} "
          f"{'CPU s/1k':>9} {'RSS MB':>7} {'db MB':>7}")
    for k, r in enumerate(rows, 1):
        print(f"{k:>5} {r.rate:7.0f} {r.term_p50:9.0f} {r.term_p99:7.0f} {r.kafka_p50:10.0f} {r.kafka_p99:7.0f} "
              f"{r.cpu_per_1k:9.2f} {r.rss_mb:7.0f} {r.mb:7.0f}")
    print("\npages touched (ms) by the statements every pass runs, at each tenth's end:")
    print(f"{'tenth':>5} " + " ".join(f"{name:>18}" for name in PROBES))
    for k, s in enumerate(samples[1:], 1):
        print(f"{k:>5} " + " ".join(f"{s.probes[name][0]:>9d} ({s.probes[name][1]:5.1f})" for name in PROBES))
    if len(rows) >= 3:
        compare(rows[1], rows[-1], samples[2], samples[-1], "pump step" if args.backlog else "mailbox -> terminal")
    if len(samples) > TENTHS and samples[-1].statements:
        grown_statements(samples[1], samples[2], samples[8], samples[9])
    print_sizes(samples[-1], stats)


def catch_up(args: argparse.Namespace, started: float, inserted: dict[int, float],
             lat: dict[int, tuple[float, float | None]]) -> None:
    """After an outage: how long the backlog took to drain from the pump's start, and what new
    traffic waited meanwhile and after."""
    ids = sorted(inserted)
    backlog, new = ids[:args.pre], ids[args.pre:]
    drained = max(lat[i][0] for i in backlog if i in lat)
    during = [(lat[i][0] - inserted[i]) * 1000 for i in new if i in lat and inserted[i] <= drained]
    after = [(lat[i][0] - inserted[i]) * 1000 for i in new if i in lat and inserted[i] > drained]
    print(f"\ncatch-up: {args.outage_hours:g} h of a {args.day_messages}-message day ({args.pre} messages) "
          f"drained {drained - started:.1f} s after msgx started, new traffic at {args.rate:.1f} msg/s "
          f"(target: under 120 s)")
    for label, values in (("new traffic during the catch-up", during), ("new traffic after it", after)):
        if values:
            print(f"  {label}: {len(values)} messages, mailbox -> terminal p50 {pct(values, 0.5):.0f} ms, "
                  f"p99 {pct(values, 0.99):.0f} ms")


def compare(second: Tenth, last: Tenth, s2: Sample, sl: Sample, latency: str) -> None:
    """One line per figure: the last tenth against the second (the first is warm-up)."""
    print("\nlast tenth against the second:")
    for name, a, b in (("throughput msg/s", second.rate, last.rate),
                       (f"{latency} p50 ms", second.term_p50, last.term_p50),
                       (f"{latency} p99 ms", second.term_p99, last.term_p99),
                       ("terminal -> Kafka p50 ms", second.kafka_p50, last.kafka_p50),
                       ("terminal -> Kafka p99 ms", second.kafka_p99, last.kafka_p99),
                       ("pump CPU s per 1,000", second.cpu_per_1k, last.cpu_per_1k),
                       ("pump RSS MB", second.rss_mb, last.rss_mb)):
        print(f"  {name:<32} {a:10.1f} -> {b:10.1f}  x{b / a if a else float('nan'):.2f}")
    for rel in sorted(sl.rel):
        a, b = s2.rel.get(rel, ("", 0, ""))[1] / 2**20, sl.rel[rel][1] / 2**20
        if max(a, b) >= 0.1:
            print(f"  size {rel:<27} {a:10.1f} -> {b:10.1f} MB  x{b / a if a else float('nan'):.2f}")


def grown_statements(a1: Sample, a2: Sample, b1: Sample, b2: Sample, top: int = 12) -> None:
    """The statements whose time per message grew most from the 2nd tenth to the 9th
    (pg_stat_statements between the samples that bound each tenth)."""
    def per_tenth(x: Sample, y: Sample) -> dict[str, tuple[int, float, int]]:
        return {q: (c - x.statements.get(q, (0, 0.0, 0))[0], t - x.statements.get(q, (0, 0.0, 0))[1],
                    b - x.statements.get(q, (0, 0.0, 0))[2]) for q, (c, t, b) in y.statements.items()}
    second, ninth = per_tenth(a1, a2), per_tenth(b1, b2)
    n2, n9 = max(1, a2.done - a1.done), max(1, b2.done - b1.done)
    rows = sorted(set(second) | set(ninth), key=lambda q: -(ninth.get(q, (0, 0.0, 0))[1] / n9
                                                            - second.get(q, (0, 0.0, 0))[1] / n2))
    print("\nstatements by time per 1,000 messages, 2nd tenth -> 9th (ms; calls; buffers a call):")
    for q in rows[:top]:
        (c2, t2, b2_), (c9, t9, b9) = second.get(q, (0, 0.0, 0)), ninth.get(q, (0, 0.0, 0))
        print(f"  {t2 / n2 * 1000:8.0f} -> {t9 / n9 * 1000:8.0f}  {c2:>7} -> {c9:>7}  "
              f"{b2_ / max(1, c2):7.0f} -> {b9 / max(1, c9):7.0f}  {q}")


def print_sizes(last: Sample, stats: list[tuple]) -> None:
    """Every msgx table at the end: size with its indexes, bytes per live row, updates, HOT updates, dead rows."""
    totals = table_totals(last.rel)
    print(f"\n{'table':<24} {'MB':>8} {'live':>9} {'B/row':>7} {'ins':>9} {'upd':>9} {'hot':>9} {'del':>9} "
          f"{'dead':>9} {'vac':>4}")
    for name, live, dead, ins, upd, hot, dele, vac in sorted(stats, key=lambda r: -totals.get(r[0], 0)):
        size = totals.get(name, 0)
        print(f"{name:<24} {size / 2**20:8.1f} {live:9d} {size / live if live else 0:7.0f} {ins:9d} {upd:9d} "
              f"{hot:9d} {dele:9d} {dead:9d} {vac:4d}")


if __name__ == "__main__":
    raise SystemExit(main())
