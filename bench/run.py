"""Run msgx benchmarks and print their figures.

Usage: python bench/run.py [NAME ...]   (NAME = pump, flop, snapshot, latency ...; default: all)

Each benchmark is a script ``bench/bench_<name>.py`` that measures its own raw floor in the same
run and prints the ratio; this runner only sequences them and reports the exit status of each.
Benchmarks talk to the machine's PostgreSQL/MariaDB (and Kafka/Redis where they need them) in
throwaway databases; nothing here is a test and nothing asserts timings.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def available() -> dict[str, Path]:
    return {p.stem.removeprefix("bench_"): p for p in sorted(HERE.glob("bench_*.py"))}


def main(argv: list[str]) -> int:
    benches = available()
    wanted = argv or list(benches)
    unknown = [n for n in wanted if n not in benches]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; available: {', '.join(benches)}", file=sys.stderr)
        return 2
    failed = []
    for name in wanted:
        print(f"=== bench {name} ===", flush=True)
        start = time.monotonic()
        rc = subprocess.call([sys.executable, str(benches[name])], cwd=HERE.parent)
        print(f"=== bench {name}: exit {rc} after {time.monotonic() - start:.1f}s ===\n", flush=True)
        if rc:
            failed.append(name)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
