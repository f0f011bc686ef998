"""Monitoring benchmark: what a ``/metrics`` scrape and a ``monitor_job``
evaluation cost on a day's worth of rows, and what the projection drift check costs now that it
runs every minute.

* state: ``--messages`` terminal ``proc_state`` rows (a day before archiving) with two released,
  sent ``msg_event`` rows each, and ``--flights`` flights (a few scalars each) written by the real
  repository; the Redis projection rebuilt from them.
* scrape: ``metrics_renderer`` (the ``/metrics`` body), median of ``--repeat`` calls.
* figures: one ``Figures`` snapshot alone (what the scrape and every check read); and with the
  mailbox read too (``--unregistered`` rows above the registered ones in a MariaDB mailbox, more
  than the monitor's count cap by default), and the scrape with it.
* drift: ``Projection.drift`` (the ``projection_drift`` check), median of ``--repeat``: with no
  difference (the writer lock is not taken at all) and with 10 flights missing from Redis (the
  lock is held only while those 10 are compared again).

Usage: ``.venv/bin/python bench/bench_monitor.py [--messages 100000] [--flights 10000]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

import bench_pump as bp  # noqa: E402
from builders import state  # noqa: E402
from sqlalchemy import text  # noqa: E402

from msgx_engine.db import make_engine  # noqa: E402
from msgx_engine.delivery.projection import Projection, connect  # noqa: E402
from msgx_engine.mailbox.adapter import Mailbox  # noqa: E402
from msgx_engine.monitor.figures import figures  # noqa: E402
from msgx_engine.monitor.metrics import metrics_renderer  # noqa: E402
from msgx_engine.store.flights import FlightRepository  # noqa: E402

REDIS = "redis://127.0.0.1:6379/0"


def median_s(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def populate(engine, messages: int, flights: int) -> None:
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO proc_state (msg_id, status, reason, created_at, updated_at, terminal_at, msg_type, msg_styp) "
            "SELECT i, CASE WHEN i % 50 = 0 THEN 'SKIPPED' ELSE 'SUCCEEDED' END, "
            "CASE WHEN i % 50 = 0 THEN 'duplicate' END, now() - interval '1 hour', now(), now(), 'FLOP', 'GTDT' "
            "FROM generate_series(1, :n) i"), {"n": messages})
        conn.execute(text(
            "INSERT INTO msg_event (msg_id, flid, topic, kind, state_version, payload, released_at, sent_at) "
            "SELECT i / 2 + 1, 'F' || (i % :f), CASE WHEN i % 2 = 0 THEN 'msg' ELSE 'schd' END, 'change', 1, "
            "'{}', now(), now() FROM generate_series(0, :n * 2 - 1) i"), {"n": messages, "f": flights})
        conn.execute(text("INSERT INTO backfill_todo (msg_id, status, done_at) SELECT i, 'DONE', now() "
                          "FROM generate_series(1, :n) i"), {"n": messages})
        repo = FlightRepository(conn)
        states = [state(f"F{i}", FLNO=f"CA{i}", STND=f"S{i % 90}") for i in range(flights)]
        repo.persist_next_states(states)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--flights", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--unregistered", type=int, default=20_000)
    args = ap.parse_args()
    name = f"{bp.TAG}_monitor"
    url = bp.pg_db(name)
    engine = make_engine(url)
    mailbox = Mailbox(bp.mysql_db(bp.TAG))
    client = connect(REDIS)
    key = f"flightInfo_{bp.TAG}"
    try:
        t0 = time.perf_counter()
        populate(engine, args.messages, args.flights)
        projection = Projection(client, key)
        projection.rebuild(engine)
        with mailbox.engine.connect() as conn:      # MariaDB's sequence engine: rows above the registered ids
            conn.execute(text("INSERT INTO cminmsgs (CMINMSGS_ID, CMINMSGS_CLOB_MSG, CMINMSGS_DATE_RECEIVED, "
                              "CMINMSGS_STATUS) SELECT seq + :base, 'x', NOW(), 'VALID' FROM seq_1_to_"
                              f"{args.unregistered:d}"), {"base": args.messages})
        setup_s = time.perf_counter() - t0
        render = metrics_renderer(engine, "production")
        body = render()
        result = {
            "messages": args.messages, "flights": args.flights, "setup_s": round(setup_s, 1),
            "scrape_ms": round(median_s(render, args.repeat) * 1000, 1),
            "scrape_bytes": len(body),
            "figures_ms": round(median_s(lambda: figures(engine), args.repeat) * 1000, 1),
            "unregistered": args.unregistered,
            "figures_with_mailbox_ms": round(median_s(lambda: figures(engine, mailbox), args.repeat) * 1000, 1),
            "scrape_with_mailbox_ms": round(median_s(metrics_renderer(engine, "production", mailbox), args.repeat)
                                            * 1000, 1),
            "drift_ms_none_differ": round(median_s(lambda: projection.drift(engine), args.repeat) * 1000, 1),
        }
        client.hdel(key, *[f"F{i}" for i in range(10)])
        result["drift_ms_10_missing"] = round(median_s(lambda: projection.drift(engine), args.repeat) * 1000, 1)
        result["drift_missing"] = projection.drift(engine).missing
        print(json.dumps(result, indent=1))
    finally:
        client.delete(key)
        client.close()
        engine.dispose()
        mailbox.dispose()
        bp.drop([name])
    return 0


if __name__ == "__main__":
    sys.exit(main())
