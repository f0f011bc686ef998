"""A Kafka outage of two hours under a day's traffic, compressed: the backlog it leaves and the
catch-up rate after it (decisions F16 and F17).

The stack: fresh PostgreSQL and MariaDB mailbox databases, a private in-memory tansu broker on a
free port, a long-lived ``msgx pump`` (no Kafka configured, so no inline dispatcher) and a
dispatcher in this process (what ``dispatch_job`` runs), the soak's stream of demo days brought to
``--day-messages`` (100,000) a day with the AODB's revisions (``soak_stream.py``).

Compressed by ``--scale`` (60): the outage lasts ``--outage-hours`` / scale of wall time; the rows
it would have brought (``--outage-hours`` of a ``--day-messages`` day) arrive in the mailbox
``--scale`` times faster than the day's mean rate while the broker is away (killed once the
dispatcher's producer has delivered to it, so it knows the broker that disappears); the dispatcher's
delivery timeout (120 s) and backoff cap (60 s) are divided by the scale too, so each event sees
as many failed attempts as in a real outage of that length (about one per 3 minutes at its cap; a
2-hour outage is past the old 30-attempt budget). Then the broker is started again, empty, on the
same address, traffic goes on at the day's peak rate (``--after-rate``, default 5 times the mean,
as ``bench_soak.py --outage-hours``) in real time, and the run measures:

- the backlog at the broker's return (released events not delivered) and that no event is DEAD;
- the first delivery after the return (the producer the empty broker no longer knows is replaced
  after two timed-out sends, F17), against two delivery timeouts;
- the catch-up: from the return until every event released before it is delivered, events
  delivered per second (the backlog and the new traffic's events) against the arrival rate of the
  day's peak traffic in events a second: the target is at least 5 times (also printed against the
  day's mean and against the compressed rate the outage's rows arrived at).

Usage: ``.venv/bin/python bench/bench_kafka_outage.py [--outage-hours 2] [--scale 60]
[--day-messages 100000] [--after-rate R]``: about 3 minutes at the defaults (2 minutes of them the
compressed outage). Not a test: nothing asserts a timing; it prints ``RESULT`` lines.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import date
from itertools import islice
from pathlib import Path

import psycopg
import pymysql

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bench_pump import MYSQL_HOST, MYSQL_PORT, fresh_databases  # noqa: E402
from private_servers import tansu_server  # noqa: E402
from soak_stream import stream  # noqa: E402

from msgx_engine.clock import SystemClock  # noqa: E402
from msgx_engine.db import make_engine  # noqa: E402
from msgx_engine.delivery import producer  # noqa: E402
from msgx_engine.delivery.dispatcher import Dispatcher, DispatchOptions  # noqa: E402
from msgx_engine.delivery.producer import DELIVERY_TIMEOUT_S, KafkaSink  # noqa: E402
from msgx_engine.mailbox.tables import cminmsgs  # noqa: E402
from msgx_engine.store.metric_totals import MESSAGES_TERMINAL  # noqa: E402
from msgx_engine.store.outbox import SendPolicy  # noqa: E402

BIN = Path(sys.executable).parent
DAY_S = 86_400
BACKOFF_CAP_S = 60.0        # SendPolicy's default cap, compressed with the rest

PROGRESS = f"SELECT coalesce(sum(value), 0) FROM metric_total WHERE name = '{MESSAGES_TERMINAL}'"
UNSENT = "SELECT count(*) FROM msg_event WHERE released_at IS NOT NULL AND sent_at IS NULL AND dead_at IS NULL"


class Feeder(threading.Thread):
    """Inserts the stream into the mailbox at ``rate`` messages a second, in small commits."""

    def __init__(self, mailbox_db: str, bodies, rate: float) -> None:
        super().__init__(daemon=True)
        self.db, self.bodies, self.rate = mailbox_db, bodies, rate
        self.sent, self.stop_flag, self.error = 0, threading.Event(), None

    def run(self) -> None:
        try:
            with pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root", database=self.db,
                                 autocommit=True) as conn:
                started = time.monotonic()
                while not self.stop_flag.is_set():
                    due = int((time.monotonic() - started) * self.rate) - self.sent
                    batch = list(islice(self.bodies, min(due, 500))) if due > 0 else []
                    if batch:
                        with conn.cursor() as cur:
                            cur.executemany(f"INSERT INTO {cminmsgs.name} (CMINMSGS_CLOB_MSG, CMINMSGS_DATE_RECEIVED, "
                                            "CMINMSGS_STATUS) VALUES (%s, now(), 'VALID')", [m.body for m in batch])
                        self.sent += len(batch)
                    self.stop_flag.wait(0.05)
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc


def scalar(conn: psycopg.Connection, sql: str, *params: object) -> object:
    row = conn.execute(sql, params).fetchone()
    return row[0] if row else None


def wait_until(conn: psycopg.Connection, sql: str, done, timeout_s: float, *params: object) -> float:
    """Poll ``sql`` until ``done(value)``; returns the seconds it took (fails past ``timeout_s``)."""
    started = time.monotonic()
    while not done(scalar(conn, sql, *params)):
        if time.monotonic() - started > timeout_s:
            raise SystemExit(f"timed out after {timeout_s:.0f} s waiting for: {sql}")
        time.sleep(0.2)
    return time.monotonic() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--outage-hours", type=float, default=2.0)
    ap.add_argument("--scale", type=float, default=60.0, help="wall time = real time / scale during the outage")
    ap.add_argument("--day-messages", type=int, default=100_000)
    ap.add_argument("--after-rate", type=float, default=0.0, help="msg/s after the outage (default: 5x the day's mean)")
    args = ap.parse_args()
    mean_rate = args.day_messages / DAY_S
    after_rate = args.after_rate or 5 * mean_rate
    outage_s = args.outage_hours * 3600 / args.scale
    timeout_s = DELIVERY_TIMEOUT_S / args.scale
    policy = SendPolicy(backoff_base_s=1.0 / args.scale, backoff_cap_s=BACKOFF_CAP_S / args.scale)
    producer.PROBE_TIMEOUT_S /= args.scale      # the stale-producer check's metadata request, compressed too
    print(f"outage {args.outage_hours:g} h compressed {args.scale:g}x: {outage_s:.0f} s of wall time, "
          f"{int(args.outage_hours * 3600 * mean_rate)} messages arriving at {mean_rate * args.scale:.1f} msg/s "
          f"(a {args.day_messages}-message day's mean {mean_rate:.2f} msg/s); delivery timeout {timeout_s:.1f} s, "
          f"backoff cap {policy.backoff_cap_s:.1f} s; after the outage {after_rate:.2f} msg/s in real time", flush=True)

    tag = f"msgx_outage_{uuid.uuid4().hex[:6]}"
    work = Path(tempfile.mkdtemp(prefix="msgx-bench-outage-"))
    broker = tansu_server()
    broker.start()
    with fresh_databases(tag, "p") as ((db_url,), mailbox_url):
        dsn = db_url.replace("postgresql+psycopg://", "postgresql://")
        env = {k: v for k, v in os.environ.items() if not k.startswith("MSGX_")}
        env.update(MSGX_DB_URL=db_url, MSGX_MAILBOX_URL=mailbox_url, MSGX_HOME=str(work / "home"))
        long = str(3600)
        with open(work / "pump.log", "wb") as log:
            pump = subprocess.Popen([str(BIN / "msgx"), "pump", "--idle-for", long, "--max-runtime", long],
                                    env=env, stdout=log, stderr=subprocess.STDOUT)
        engine = make_engine(db_url)
        stop = threading.Event()
        sink = KafkaSink(broker.bootstrap, delivery_timeout_s=timeout_s)
        dispatcher = Dispatcher(engine, sink, SystemClock(), topic_msg=f"msg_{tag}", topic_schd=f"schd_{tag}",
                                options=DispatchOptions(run_for_s=24 * 3600, policy=policy), should_stop=stop.is_set)
        summary: dict = {}
        feeder = after = None
        thread = threading.Thread(target=lambda: summary.setdefault("s", dispatcher.run()), daemon=True)
        bodies = stream(date.today(), args.day_messages)
        try:
            thread.start()
            feeder = Feeder(tag, bodies, mean_rate * args.scale)
            feeder.start()
            with psycopg.connect(dsn, autocommit=True) as conn:     # the producer knows the broker
                wait_until(conn, "SELECT count(*) FROM msg_event WHERE sent_at IS NOT NULL", lambda n: n > 0, 120)
            broker.kill()                       # the outage: nothing listens on the broker's address
            time.sleep(outage_s)
            feeder.stop_flag.set()
            feeder.join()
            with psycopg.connect(dsn, autocommit=True) as conn:
                # the pump finishes the outage's rows: the backlog is what the outage left
                wait_until(conn, PROGRESS, lambda n: n >= feeder.sent, 300)
                backlog = int(scalar(conn, UNSENT))
                dead = int(scalar(conn, "SELECT count(*) FROM msg_event WHERE dead_at IS NOT NULL"))
                most = scalar(conn, "SELECT max(send_attempts) FROM msg_event")
                print(f"backlog at the broker's return: {feeder.sent} messages, {backlog} undelivered events, "
                      f"{dead} dead; the most attempts on one event {most} (the old budget made events DEAD at 30)",
                      flush=True)
                broker.start()                  # empty, on the same address
                back_at = scalar(conn, "SELECT now()")
                after = Feeder(tag, bodies, after_rate)
                after.start()
                first_s = wait_until(conn, "SELECT count(*) FROM msg_event WHERE sent_at > %s", lambda n: n > 0,
                                     600, back_at)
                took = first_s + wait_until(conn, "SELECT count(*) FROM msg_event WHERE released_at <= %s AND "
                                            "sent_at IS NULL", lambda n: n == 0, 600, back_at)
                delivered = int(scalar(conn, "SELECT count(*) FROM msg_event WHERE sent_at > %s", back_at))
                per_msg = float(scalar(conn, "SELECT count(*)::float8 / greatest(count(DISTINCT msg_id), 1) "
                                       "FROM msg_event"))
                dead = int(scalar(conn, "SELECT count(*) FROM msg_event WHERE dead_at IS NOT NULL"))
                after.stop_flag.set()
                after.join()
        finally:
            stop.set()
            thread.join(timeout_s + 30)
            pump.terminate()
            pump.wait(60)
            engine.dispose()
            broker.stop()
        for f in (feeder, after):
            if f is not None and f.error is not None:
                raise SystemExit(f"the feeder failed: {f.error!r}")
    rate = delivered / took
    arrival = after_rate * per_msg
    print(f"first delivery {first_s:.1f} s after the broker's return (two delivery timeouts: {2 * timeout_s:.1f} s); "
          f"producer rebuilds {summary['s'].producer_rebuilds if summary else '?'}, dead events {dead}")
    print(f"catch-up: every event released before the return delivered {took:.1f} s after it, {delivered} events "
          f"delivered meanwhile ({per_msg:.2f} events a message)")
    for name, what, floor in (("kafka_outage", "the day's peak arrival rate", arrival),
                              ("kafka_outage_mean", "the day's mean arrival rate", mean_rate * per_msg),
                              ("kafka_outage_compressed", "the compressed outage's arrival rate",
                               mean_rate * args.scale * per_msg)):
        print(f"catch-up {rate:.1f} events/s against {what} {floor:.2f} events/s: ratio {rate / floor:.1f} "
              f"(target >= 5)")
        print(f"RESULT {name}\t{rate:.1f}\t{floor:.2f}\t{rate / floor:.1f}\tevents/s\t5", flush=True)
    print(f"logs in {work}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
