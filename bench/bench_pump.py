"""Pump benchmark (DESIGN §6): GTDT messages end to end vs the raw floor, same run.

* protocol: N GTDT messages in a fresh MariaDB mailbox, drained by ``App.pump`` with the full
  protocol (intake, head, decode, identity, transaction 1, transaction 2, backfill mark), timed
  from ``Pump.run`` (its locks and first intake pass included, the mailbox inserts not).
* floor (run before and after the protocol, their mean): a raw psycopg loop of one GTDT-like
  transaction per message with the same tables, on a fresh migrated database whose
  ``proc_state`` already holds the messages: lock (the writer row),
  read the flight, replace its gates, update the flight, one outbox row, the status row, commit.
  No intake, no decode, no mark: the least one transaction per message costs.

Prints rate, floor and ratio (target >= 0.7) and one ``RESULT`` line for ``bench/run.py``.
Usage: ``.venv/bin/python bench/bench_pump.py [--messages 3000] [--flights 500] [--profile]
[--group 64] [--group-ms 50] [--read-ahead 64] [--redis URL]`` (the group options tune the pump's
group commit; ``--redis`` adds the Redis projection, and with it a post-commit step per message).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pymysql

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from builders import gtdt  # noqa: E402

from msgx_engine.app import App  # noqa: E402
from msgx_engine.config import Settings  # noqa: E402
from msgx_engine.db import make_engine  # noqa: E402
from msgx_engine.mailbox.adapter import Mailbox  # noqa: E402
from msgx_engine.mailbox.tables import cminmsgs  # noqa: E402
from msgx_engine.pipeline.pump import PumpOptions  # noqa: E402
from msgx_engine.store import migrate  # noqa: E402

PG = os.environ.get("MSGX_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
MYSQL_HOST, MYSQL_PORT = "127.0.0.1", 3306
TAG = f"msgx_bench_{uuid.uuid4().hex[:6]}"


def pg_db(name: str) -> str:
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = PG.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://") + f"/{name}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    return url


def mysql_db(name: str) -> str:
    with pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root", autocommit=True) as conn:
        conn.cursor().execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    url = f"mysql+pymysql://root@{MYSQL_HOST}:{MYSQL_PORT}/{name}"
    Mailbox(url).init()
    return url


def drop(names: list[str], mailbox: str = TAG) -> None:
    """Drop the benchmark's PostgreSQL databases and its MariaDB mailbox."""
    with psycopg.connect(PG, autocommit=True) as conn:
        for n in names:
            conn.execute(f'DROP DATABASE IF EXISTS "{n}" WITH (FORCE)')
    with pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root", autocommit=True) as conn:
        conn.cursor().execute(f"DROP DATABASE IF EXISTS `{mailbox}`")


@contextmanager
def fresh_databases(tag: str, *suffixes: str) -> Iterator[tuple[list[str], str]]:
    """Migrated PostgreSQL databases ``<tag>_<suffix>`` and a MariaDB mailbox ``<tag>``, made for one
    benchmark run and dropped however it ends: their URLs (PostgreSQL's in ``suffixes`` order)."""
    names = [f"{tag}_{suffix}" for suffix in suffixes]
    try:
        yield [pg_db(name) for name in names], mysql_db(tag)
    finally:
        drop(names, tag)


def bench_app(pg_url: str, mailbox_url: str, home: str, *, redis_url: str | None = None) -> App:
    """An App on a benchmark's databases, checked ready: the pump without Kafka (and without Redis
    unless ``redis_url``), its home in ``/tmp/<home>``."""
    app = App.from_settings(Settings(db_url=pg_url, mailbox_url=mailbox_url, kafka_bootstrap=None,
                                     redis_url=redis_url, home=Path("/tmp") / home))
    app.check_ready()
    return app


def report(name: str, what: str, rate: float, floor: float, unit: str, *, target: float) -> None:
    """Rate, floor and ratio, readable and as one ``RESULT`` line ``bench/run.py`` collects."""
    ratio = rate / floor
    print(f"{what}")
    print(f"  msgx  {rate:9.1f} {unit}\n  floor {floor:9.1f} {unit}\n  ratio {ratio:9.2f}  (target "
          f"{'>=' if target < 1 else '<='} {target})")
    print(f"RESULT {name}\t{rate:.1f}\t{floor:.1f}\t{ratio:.2f}\t{unit}\t{target}", flush=True)


def workload(n: int, flights: int) -> list[tuple[str, list[tuple[int, str]], str]]:
    """(flid, gates, xml) per message; each flight gets a different gate set every time."""
    out = []
    for i in range(n):
        flid = f"BF{i % flights:05d}"
        gates = [(1, f"G{i % 97:02d}"), (2, f"H{i % 89:02d}")]
        out.append((flid, gates, gtdt(flid, *gates)))
    return out


def run_protocol(pg_url: str, mb_url: str, work, profile: bool, options: PumpOptions,
                 redis_url: str | None = None) -> float:
    mailbox = Mailbox(mb_url)
    with mailbox.engine.begin() as conn:
        for start in range(0, len(work), 1000):
            conn.execute(cminmsgs.insert(), [{"CMINMSGS_CLOB_MSG": x, "CMINMSGS_STATUS": "VALID"}
                                            for _, _, x in work[start:start + 1000]])
    mailbox.dispose()
    app = bench_app(pg_url, mb_url, TAG, redis_url=redis_url)
    pump = app.pump(options)
    prof = cProfile.Profile() if profile else None
    t0 = time.perf_counter()
    if prof:
        prof.enable()
    summary = pump.run()
    if prof:
        prof.disable()
    elapsed = time.perf_counter() - t0
    done = sum(summary.processed.values())
    assert done == len(work), f"processed {done} of {len(work)}: {summary.processed}"
    assert summary.marked == len(work), f"marked {summary.marked}"
    app.dispose()
    if prof:
        pstats.Stats(prof).sort_stats(os.environ.get("MSGX_PROFILE_SORT", "cumulative")).print_stats(35)
    return elapsed


def run_floor(pg_url: str, work) -> float:
    """One GTDT-like transaction per message (the raw floor): lock, read flight, replace gates,
    update flight, outbox row, status row, commit; statement by statement, as a plain loop would."""
    dsn = pg_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn) as conn:
        with conn.cursor() as cur:      # the messages are registered, as the protocol's are by intake
            cur.executemany("INSERT INTO proc_state (msg_id, status) VALUES (%s, 'PENDING')",
                            [(i,) for i in range(1, len(work) + 1)])
            cur.execute("INSERT INTO pipeline_lock (name) VALUES ('bench') ON CONFLICT DO NOTHING")
        conn.commit()
        t0 = time.perf_counter()
        for msg_id, (flid, gates, _) in enumerate(work, start=1):
            conn.execute("SELECT name FROM pipeline_lock WHERE name = 'bench' FOR UPDATE")
            row = conn.execute("SELECT state_version FROM flight_schd WHERE flid = %s FOR UPDATE",
                               (flid,)).fetchone()
            version = (row[0] if row else 0) + 1
            conn.execute("DELETE FROM flight_gate WHERE flid = %s", (flid,))
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO flight_gate (flid, ordinal, source_seq, record_version, gate, gtyp) "
                    "VALUES (%s, %s, %s, %s, %s, 'D')",
                    [(flid, o, str(o), version, g) for o, g in gates])
            conn.execute(
                "INSERT INTO flight_schd (flid, state_version, last_message_id) VALUES (%s, %s, %s) "
                "ON CONFLICT (flid) DO UPDATE SET state_version = excluded.state_version, "
                "last_message_id = excluded.last_message_id, updated_at = now()", (flid, version, msg_id))
            conn.execute("INSERT INTO msg_event (msg_id, flid, topic, kind, state_version, payload) "
                         "VALUES (%s, %s, 'msg', 'change', %s, %s)",
                         (msg_id, flid, version, json.dumps({"FLID": flid, "GTDT": gates})))
            conn.execute("UPDATE proc_state SET status = 'SUCCEEDED', terminal_at = now(), updated_at = now() "
                         "WHERE msg_id = %s", (msg_id,))
            conn.commit()
        return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--flights", type=int, default=500)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--group", type=int, default=PumpOptions.group_messages, help="messages per group commit")
    ap.add_argument("--group-ms", type=float, default=PumpOptions.group_s * 1000, help="a group's longest open time")
    ap.add_argument("--read-ahead", type=int, default=PumpOptions.read_ahead, help="heads read at once")
    ap.add_argument("--redis", metavar="URL", help="with the Redis projection (two transactions per message, P12)")
    args = ap.parse_args()
    options = PumpOptions(group_messages=args.group, group_s=args.group_ms / 1000, read_ahead=args.read_ahead)
    work = workload(args.messages, args.flights)
    with fresh_databases(TAG, "p", "f", "g") as ((pg_proto, pg_floor, pg_floor2), mb):
        # the floor runs before and after the protocol and counts as their mean: on a shared
        # machine the load drifts, and a floor taken only before skews the ratio either way
        before_s = run_floor(pg_floor, work)
        proto_s = run_protocol(pg_proto, mb, work, args.profile, options, args.redis)
        after_s = run_floor(pg_floor2, work)
    n = len(work)
    floor_s = (before_s + after_s) / 2
    print(f"floor before {n / before_s:.1f} msg/s, after {n / after_s:.1f} msg/s")
    report("pump_redis" if args.redis else "pump", f"{n} GTDT over {args.flights} flights, mailbox -> terminal + "
           f"mark{' + Redis projection' if args.redis else ''}", n / proto_s, n / floor_s, "msg/s", target=0.7)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
