"""Run msgx benchmarks and print their figures.

Usage: python bench/run.py [NAME ...]   (NAME = pump, flop, snapshot, latency ...; default: all)

Each benchmark is a script ``bench/bench_<name>.py`` that measures its own raw floor in the same
run and prints the ratio, plus ``RESULT name rate floor ratio unit target`` lines; this runner
sequences them, reports the exit status of each and ends with one table of every RESULT line
(rate, floor and ratio side by side).
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
    results: list[list[str]] = []
    for name in wanted:
        print(f"=== bench {name} ===", flush=True)
        start = time.monotonic()
        proc = subprocess.Popen([sys.executable, str(benches[name])], cwd=HERE.parent,
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            print(line, end="", flush=True)
            if line.startswith("RESULT "):
                results.append(line.split(maxsplit=1)[1].rstrip("\n").split("\t"))
        rc = proc.wait()
        print(f"=== bench {name}: exit {rc} after {time.monotonic() - start:.1f}s ===\n", flush=True)
        if rc:
            failed.append(name)
    print(summary(results))
    return 1 if failed else 0


def summary(results: list[list[str]]) -> str:
    """One table: benchmark, msgx rate, floor rate, ratio and its target (rates in each unit). A
    target is a lower bound on the ratio unless it names its own comparison (the latency's
    ``<= 300``, a bound on the figure itself, which has no floor)."""
    lines = [f"{'benchmark':<12} {'msgx':>10} {'floor':>10} {'ratio':>6} {'target':>7}  unit"]
    for name, rate, floor, ratio, unit, target in results:
        bound = target if target[:1] in "<>" else ">= " + target
        lines.append(f"{name:<12} {rate:>10} {floor:>10} {ratio:>6} {bound:>7}  {unit}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
