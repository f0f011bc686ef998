"""Intake flatness benchmark: 500 GTDT messages behind 100,000 processed mailbox rows
vs the same 500 alone.

* alone: a fresh MariaDB mailbox and state database; one pump pass on the empty mailbox (start-up
  work done), then 500 messages inserted and drained by ``App.pump`` (timed).
* behind: the same, except the mailbox first holds 100,000 rows already processed
  (``CMINMSGS_DATE_PROCESSED`` set), adopted as history by the first pump pass.

Intake reads above its high-water mark and re-checks only open gaps, so the processed history must
not slow the 500 down: the ratio behind/alone (time) should stay <= 1.2. Each side runs ``--runs``
times, alternating; the medians are compared. Prints a ``RESULT`` line for ``bench/run.py`` (as a
rate: messages per second behind vs alone, so the ratio reads >= 1/1.2 = 0.83).
Usage: ``.venv/bin/python bench/bench_intake.py [--history 100000] [--messages 500] [--runs 3]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent / "tests")]

import bench_pump as bp  # noqa: E402

from msgx_engine.mailbox.adapter import Mailbox  # noqa: E402
from msgx_engine.mailbox.tables import cminmsgs  # noqa: E402
from msgx_engine.pipeline.pump import PumpOptions  # noqa: E402


def fill(mb_url: str, bodies: list[str], processed: bool) -> None:
    mailbox = Mailbox(mb_url)
    stamp = datetime(2026, 1, 1) if processed else None
    with mailbox.engine.begin() as conn:
        for start in range(0, len(bodies), 2000):
            conn.execute(cminmsgs.insert(), [
                {"CMINMSGS_CLOB_MSG": x, "CMINMSGS_STATUS": "VALID", "CMINMSGS_DATE_PROCESSED": stamp}
                for x in bodies[start:start + 2000]])
    mailbox.dispose()


def one_run(history: int, n: int, tag: str) -> float:
    """Seconds to drain n messages behind ``history`` processed rows (start-up excluded)."""
    with bp.fresh_databases(tag, "p") as ((pg,), mb):
        if history:
            old = [x for _, _, x in bp.workload(min(history, 1000), 100)]
            fill(mb, [old[i % len(old)] for i in range(history)], processed=True)
        app = bp.bench_app(pg, mb, tag)
        app.pump(PumpOptions()).run()                      # adopt the history, start-up work done
        fill(mb, [x for _, _, x in bp.workload(n, 50)], processed=False)
        t0 = time.perf_counter()
        summary = app.pump(PumpOptions()).run()
        elapsed = time.perf_counter() - t0
        done = sum(summary.processed.values())
        assert done == n and summary.marked == n, f"processed {done}, marked {summary.marked} of {n}"
        app.dispose()
        return elapsed


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--history", type=int, default=100_000)
    ap.add_argument("--messages", type=int, default=500)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    alone: list[float] = []
    behind: list[float] = []
    for _ in range(args.runs):                 # alternating, so load drifts hit both sides alike
        alone.append(one_run(0, args.messages, f"msgx_bint_{uuid.uuid4().hex[:6]}"))
        behind.append(one_run(args.history, args.messages, f"msgx_bint_{uuid.uuid4().hex[:6]}"))
    a, b = statistics.median(alone), statistics.median(behind)
    print(f"{args.messages} messages alone: {', '.join(f'{x:.2f}' for x in alone)} s (median {a:.2f})")
    print(f"{args.messages} messages behind {args.history} processed rows: "
          f"{', '.join(f'{x:.2f}' for x in behind)} s (median {b:.2f}); time ratio {b / a:.2f} (target <= 1.2)")
    bp.report("intake", f"{args.messages} messages behind {args.history} processed rows vs alone",
              args.messages / b, args.messages / a, "msg/s", target=round(1 / 1.2, 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
