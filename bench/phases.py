"""Where a new day's snapshot spends the pump's time: CPU and wall seconds per phase.

``bench_snapshot.py`` gives the ratio to the floor and each process's CPU; this script takes the
same 10,000-flight package through ``App.pump`` on fresh databases, ``--runs`` times, and times the
pump's phases around the functions that do them (``Processor.read_and_decode``, ``decide``,
``write_state`` and the snapshot's parts inside them). For each phase it prints the medians of its
CPU seconds (this thread's: the pump's own work), its wall seconds, and their difference: the
time the pump waited, for the offload helper's part of the records (``package_flights``) or for
PostgreSQL (the COPYs). The phases nest (``decide`` holds ``package_flights``): they do not add
up. It measures code in place, so it needs no floor and prints no ratio; the figures of
docs/history/benchmarks.md (run 28, the helper's share) come from it. Usage:
``.venv/bin/python bench/phases.py [--flights 10000] [--runs 3]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pump import bench_app, fresh_databases  # noqa: E402  (shared database setup)
from bench_snapshot import run_protocol  # noqa: E402
from snapshot_builders import big_package  # noqa: E402

from msgx_engine.handlers import snapshot  # noqa: E402
from msgx_engine.pipeline import protocol  # noqa: E402
from msgx_engine.pipeline.large_bodies import offload
from msgx_engine.store import flights, outbox  # noqa: E402

# (owner, attribute, phase name): what is timed, outermost first
PHASES: tuple[tuple[Any, str, str], ...] = (
    (protocol.Processor, "read_and_decode", "decode"),
    (protocol.Processor, "decide", "decide"),
    (snapshot, "outline", "  outline"),
    (snapshot, "package_flights", "  package_flights (the pump's records, the helper's read)"),
    (protocol.Processor, "write_state", "transaction 1's writes"),
    (flights.FlightRepository, "persist_next_states", "  main and detail rows (COPY)"),
    (outbox, "insert", "  outbox rows (COPY, documents built as sent)"),
)


class PhaseTimer:
    """Wraps each phase's function to add its CPU and wall seconds to the current run's totals.
    The attribute is replaced, so only callers that look it up when they call are timed: all of
    the ones above (a plan writer is not, since ``pipeline.plans`` holds it in its registry)."""

    def __init__(self) -> None:
        self.runs: list[dict[str, tuple[float, float]]] = []
        self._current: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])

    def install(self) -> None:
        for owner, name, label in PHASES:
            setattr(owner, name, self._timed(getattr(owner, name), label))

    def _timed(self, fn: Callable[..., Any], label: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            cpu, wall = time.thread_time(), time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                totals = self._current[label]
                totals[0] += time.thread_time() - cpu
                totals[1] += time.perf_counter() - wall
        return timed

    def end_run(self) -> None:
        self.runs.append({label: (cpu, wall) for label, (cpu, wall) in self._current.items()})
        self._current.clear()


def one_run(xml: str, timer: PhaseTimer) -> float:
    tag = f"msgx_phases_{uuid.uuid4().hex[:6]}"
    with fresh_databases(tag, "p") as ((url,), mailbox):
        app = bench_app(url, mailbox, tag)
        wall = run_protocol(app, xml, False).terminal.wall
        app.dispose()
    timer.end_run()
    return wall


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--flights", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    offload.warm_up()
    xml = big_package(args.flights)
    timer = PhaseTimer()
    timer.install()
    walls = []
    for i in range(args.runs):
        walls.append(one_run(xml, timer))
        print(f"run {i + 1}/{args.runs}: new day, registered -> terminal {walls[-1]:.2f} s", flush=True)
    print(f"{args.flights} flights, new day, medians of {args.runs} runs: {statistics.median(walls):.2f} s")
    print(f"{'phase':60s} {'CPU s':>7s} {'wall s':>7s} {'waited':>7s}")
    for _, _, label in PHASES:
        seen = [run[label] for run in timer.runs if label in run]
        if not seen:
            continue
        cpu = statistics.median(c for c, _ in seen)
        wall = statistics.median(w for _, w in seen)
        print(f"{label:60s} {cpu:7.3f} {wall:7.3f} {wall - cpu:7.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
