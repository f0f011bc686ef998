"""The latency target on databases a soak has filled: ``bench_latency.py`` run K times on them.

A soak (``bench_soak.py --backlog N --no-delivery``) leaves a database with N messages processed and
their events still in the outbox. The question is whether msgx then still meets DESIGN §6's
target, p99 <= 300 ms at 250 msg/s under ``dagster dev``, and in every run, not in one lucky one.
``latency_runs`` runs ``bench_latency.py --mode dagster --db-url … --mailbox-url …`` one run after
another on those databases (each run its own ``dagster dev``, Redis and Kafka topics; the first run's
warm-up also delivers the outbox), echoes each run's output prefixed with its number and returns
what each run measured; ``print_runs`` shows them as a table with the verdict.

``settle`` defaults to 65 s: every run starts a new ``dagster dev``, whose minute schedules all tick
in its first minute and start runs whose cold starts take CPU from the pump. The first run's
warm-up, delivering a large outbox, outlasts that minute, but the later runs' warm-ups take
seconds; 65 s puts every run's load after it, and is what the recorded ``dagster dev`` figures used
(docs/benchmarks.md), so the soak's figures compare with them.

Usage: ``.venv/bin/python bench/soak_latency.py --db-url URL --mailbox-url URL [--runs 5] [--rate 250]
[--seconds 60] [--settle 65] [--warm-timeout 900]``
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from msgx_engine.redact import redact_urls

HERE = Path(__file__).resolve().parent
TARGET_MS = 300.0

_COUNTS = re.compile(r"^mode \w+: (\d+) messages at ([\d.]+) msg/s over .*?, (\d+) not delivered")
_LATENCY = re.compile(r"^latency mailbox insert -> Kafka msg record: p50 (\d+) ms, p99 (\d+) ms, max (\d+) ms")
_RESULT = re.compile(r"^RESULT latency_p99\t(\d+)\t")
_WARM = re.compile(r"^warm-up (?:delivered after|took) ([\d.]+)s")


@dataclass
class LatencyRun:
    """One run's figures; None where the run ended before printing them (its exit code says so)."""

    run: int
    exit_code: int
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    messages: int | None = None
    rate: float | None = None             # msg/s the writer achieved
    not_delivered: int | None = None
    warm_s: float | None = None           # the warm-up: the warm message, and the outbox when it held events

    @property
    def met(self) -> bool:
        """The target held: every message delivered and p99 within the bound (a p99 over the
        delivered messages of a run that lost some says nothing about the lost ones)."""
        return (self.exit_code == 0 and self.not_delivered == 0 and self.p99_ms is not None
                and self.p99_ms <= TARGET_MS)


def parse_line(record: LatencyRun, line: str) -> None:
    """Take what ``line`` of bench_latency's output says into ``record``."""
    if m := _COUNTS.match(line):
        record.messages, record.rate, record.not_delivered = int(m[1]), float(m[2]), int(m[3])
    elif m := _LATENCY.match(line):
        record.p50_ms, record.max_ms = float(m[1]), float(m[3])
        if record.p99_ms is None:
            record.p99_ms = float(m[2])
    elif m := _RESULT.match(line):
        record.p99_ms = float(m[1])             # the figure bench/run.py collects: it has the last word
    elif m := _WARM.match(line):
        record.warm_s = float(m[1])             # "took" (the outbox too) follows "delivered after"


def latency_runs(db_url: str, mailbox_url: str, runs: int, *, rate: float = 250, seconds: float = 60,
                 settle: float = 65, warm_timeout: float = 900,
                 extra_args: Sequence[str] = ()) -> list[LatencyRun]:
    """Run ``bench_latency.py`` under ``dagster dev`` ``runs`` times, one after another, on these
    existing databases (never dropped); each run's output is echoed as it comes, prefixed
    ``[run i/K]``. ``extra_args`` go to every run (``--stages``, say)."""
    out = []
    for i in range(1, runs + 1):
        argv = [sys.executable, str(HERE / "bench_latency.py"), "--mode", "dagster", "--db-url", db_url,
                "--mailbox-url", mailbox_url, "--rate", str(rate), "--seconds", str(seconds),
                "--settle", str(settle), "--warm-timeout", str(warm_timeout), *extra_args]
        prefix = f"[run {i}/{runs}] "
        print(prefix + redact_urls(" ".join(argv[1:])), flush=True)
        proc = subprocess.Popen(argv, cwd=HERE.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, bufsize=1)
        assert proc.stdout is not None
        record = LatencyRun(run=i, exit_code=-1)
        for line in proc.stdout:
            print(prefix + line, end="", flush=True)
            parse_line(record, line)
        record.exit_code = proc.wait()
        out.append(record)
    return out


def _cell(value: float | int | None, fmt: str) -> str:
    """``value`` formatted, or a dash as wide (``fmt`` starts with the width)."""
    return format("-", f">{int(fmt.split('.')[0].rstrip('df'))}") if value is None else format(value, fmt)


def print_runs(runs: Sequence[LatencyRun]) -> None:
    """One line per run and whether every run met p99 <= 300 ms with every message delivered."""
    print(f"{'run':>3} {'exit':>4} {'warm s':>7} {'messages':>8} {'msg/s':>6} {'lost':>5} {'p50 ms':>7} "
          f"{'p99 ms':>7} {'max ms':>7}")
    for r in runs:
        print(f"{r.run:>3} {r.exit_code:>4} {_cell(r.warm_s, '7.1f')} {_cell(r.messages, '8d')} "
              f"{_cell(r.rate, '6.1f')} {_cell(r.not_delivered, '5d')} {_cell(r.p50_ms, '7.0f')} "
              f"{_cell(r.p99_ms, '7.0f')} {_cell(r.max_ms, '7.0f')}")
    every = bool(runs) and all(r.met for r in runs)
    print(f"every run p99 <= {TARGET_MS:.0f} ms: {'yes' if every else 'no'} "
          f"({sum(r.met for r in runs)} of {len(runs)} runs met it with every message delivered)", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db-url", required=True)
    ap.add_argument("--mailbox-url", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rate", type=float, default=250.0)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--settle", type=float, default=65.0)
    ap.add_argument("--warm-timeout", type=float, default=900.0)
    args = ap.parse_args()
    runs = latency_runs(args.db_url, args.mailbox_url, args.runs, rate=args.rate, seconds=args.seconds,
                        settle=args.settle, warm_timeout=args.warm_timeout)
    print_runs(runs)
    return 0 if runs and all(r.met for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
