"""Instruction counts of the snapshot and its floors, under valgrind's callgrind.

On the 2-core virtual machines this project is measured on, one benchmark's wall and CPU seconds
vary from run to run by more than most code changes move them (docs/benchmarks.md). An
instruction count does not: callgrind counts the instructions a process executes, the same for
the same code and inputs whatever else the machine is doing. So a change to the snapshot's Python
side can be judged by one run of this script before and after it, where the seconds need many
interleaved runs.

Each figure is the difference of two runs of one child process under callgrind: the same set-up
(fresh databases, the package generated, for the snapshot the message put into the mailbox and
registered) with and without the measured step. What is counted is this Python process only: the
PostgreSQL and MariaDB servers, the disk, and the helper process (``pipeline/large_bodies/offload.py``: the
hash, P17, and since P27 60% of a large package's extraction) are left out, so the count is the
pump's own cost, not the time; compare counts only between code that gives the helper the same work.
The step is the same code the seconds benchmark (``bench_snapshot.py``) times: ``run_plain_floor`` (the raw floor),
``run_output_floor`` (the plain code that writes everything a snapshot writes) and the pump from
registered to terminal for a new day.

Usage: ``.venv/bin/python bench/instructions.py [--flights 2000] [--jobs 2]`` (valgrind is on
every machine of this kind; a 2,000-flight package takes about three minutes on two cores).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

STEPS = ("floor", "output", "snapshot")
_COLLECTED = re.compile(rb"Collected : (\d+)")


def child(step: str, measured: bool, flights: int) -> None:
    """One counted process: the set-up of ``step``, then the step itself when ``measured``."""
    from bench_pump import drop, mysql_db, pg_db
    from bench_snapshot import run_output_floor, run_plain_floor
    from snapshot_builders import big_package

    tag = f"msgx_bins_{uuid.uuid4().hex[:6]}"
    xml = big_package(flights)
    try:
        pg = pg_db(f"{tag}_p")
        if step == "snapshot":
            _snapshot(pg, mysql_db(tag), xml, measured)
        elif measured:
            (run_plain_floor if step == "floor" else run_output_floor)(pg, xml)
    finally:
        drop([f"{tag}_p"], tag)


def _snapshot(pg: str, mailbox: str, xml: str, measured: bool) -> None:
    from bench_pump import bench_app

    from msgx_engine.pipeline.intake import Intake
    from msgx_engine.pipeline.pump import PumpOptions

    app = bench_app(pg, mailbox, Path(pg).name)
    try:
        app.mailbox.put(xml)
        with app.engine.connect() as conn:
            Intake(app.mailbox, app.clock).scan(conn)
        if measured:
            summary = app.pump(PumpOptions()).run()
            if summary.processed.get("SUCCEEDED") != 1:
                raise SystemExit(f"the snapshot did not succeed: {summary.processed}")
    finally:
        app.dispose()


def count(step: str, measured: bool, flights: int) -> int:
    """The instructions one child process executed, as callgrind totals them."""
    argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", "--trace-children=no",
            sys.executable, str(Path(__file__).resolve()), "--child", step, "--flights", str(flights)]
    if measured:
        argv.append("--measured")
    env = {**os.environ, "PYTHONHASHSEED": "0"}     # the same dict layouts in every run
    done = subprocess.run(argv, cwd=HERE.parent, env=env, capture_output=True)
    found = _COLLECTED.search(done.stderr)
    if done.returncode or found is None:
        raise SystemExit(f"{step}: callgrind run failed ({done.returncode}):\n{done.stderr.decode()[-2000:]}")
    return int(found.group(1))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--flights", type=int, default=2000)
    ap.add_argument("--jobs", type=int, default=2, help="callgrind runs at once (each takes one core)")
    ap.add_argument("--child", choices=STEPS, help=argparse.SUPPRESS)
    ap.add_argument("--measured", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.measured, args.flights)
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian package valgrind)", file=sys.stderr)
        return 2
    runs = [(step, measured) for step in STEPS for measured in (False, True)]
    print(f"counting {len(runs)} runs under callgrind, {args.flights} flights, {args.jobs} at a time ...", flush=True)
    with ThreadPoolExecutor(args.jobs) as pool:
        totals = dict(zip(runs, pool.map(lambda r: count(r[0], r[1], args.flights), runs), strict=True))
    steps = {step: totals[(step, True)] - totals[(step, False)] for step in STEPS}
    floor = steps["floor"]
    print(f"instructions of this Python process (servers, disk and helper process left out), {args.flights} flights:")
    for step, label in (("floor", "floor"), ("output", "same-output floor"),
                        ("snapshot", "snapshot, new day")):
        n = steps[step]
        print(f"  {label:<20} {n / 1e6:>9,.0f} M  {n / args.flights / 1e3:>7,.0f} k per flight  "
              f"{n / floor:>5.2f}x the floor")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
