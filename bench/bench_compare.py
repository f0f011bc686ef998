"""``msgx compare`` benchmark (go-live, OPS-4): 10,000 flights on each side, a few hundred differing.

* setup: two migrated msgx databases filled by the real repository with the same ``--flights``
  flights of today (a dozen scalars and two gates each), then ``--differ`` of them changed on the
  reference side (a gate, a stand, a flight number, a flight removed or added); the reference
  database also projected into a Redis hash of its own.
* msgx: the whole command (``compare.run``: read both sides read-only, compare, render the JSON
  report), PostgreSQL against PostgreSQL and PostgreSQL against the Redis hash, median of
  ``--repeat``, each timed in turn with its floor; and from the two sides' JSON texts: decode,
  ``diff.compare`` and the report.
* floor, measured in the same run: the same 2 x 10,000 whole-state JSON documents decoded with
  orjson and compared as plain dicts per FLID (what any comparison must at least do), and reading
  both databases' documents (``sources.read_postgresql`` twice, the read any comparison needs).

Usage: ``.venv/bin/python bench/bench_compare.py [--flights 10000] [--differ 300] [--repeat 3]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path
from types import MappingProxyType

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

import bench_pump as bp  # noqa: E402
import orjson  # noqa: E402

from msgx_engine.compare import report  # noqa: E402
from msgx_engine.compare.diff import compare  # noqa: E402
from msgx_engine.compare.run import run  # noqa: E402
from msgx_engine.compare.sources import read_postgresql  # noqa: E402
from msgx_engine.db import make_engine  # noqa: E402
from msgx_engine.delivery.projection import Projection, connect  # noqa: E402
from msgx_engine.sis.times import LOCAL_TZ  # noqa: E402
from msgx_engine.state.model import FlightState, freeze_entry  # noqa: E402
from msgx_engine.state.serialize import state_json  # noqa: E402
from msgx_engine.store.flights import FlightRepository  # noqa: E402

REDIS = "redis://127.0.0.1:6379/0"


def flight(i: int, *, gate: str | None = None, stnd: str | None = None, flno: str | None = None) -> FlightState:
    fields: dict = {"ALCD": "CA", "FLNO": flno or f"CA{i:04d}", "MVIN": "A" if i % 2 else "D", "FLTY": "P",
                    "FLIN": "I", "ACFT": "320", "RENO": f"B{i:04d}", "TRML": "T2", "STND": stnd or f"{i % 90}",
                    "SODT": f"2026-12-05 {(i // 60) % 24:02d}:{i % 60:02d}", "ESTT": "2026-12-05 10:00",
                    "PAXC": str(100 + i % 80),
                    "GTDT": tuple(freeze_entry({"GTNO": str(n), "GATE": gate or f"G{(i + n) % 40}", "GTYP": "D"})
                                  for n in (1, 2))}
    return FlightState(flid=f"F{i:06d}", fields=MappingProxyType(dict(sorted(fields.items()))),
                       fday=datetime.now(LOCAL_TZ).date(), state_version=1 + i % 5)


def sides(n: int, differ: int) -> tuple[list[FlightState], list[FlightState]]:
    """Here and there: identical but for ``differ`` flights spread over the day (four kinds)."""
    here = [flight(i) for i in range(n)]
    there = list(here)
    step = max(1, n // differ)
    changed = list(range(0, n, step))[:differ]
    for k, i in enumerate(changed):
        kind = k % 4
        if kind == 0:
            there[i] = flight(i, gate="Z1")
        elif kind == 1:
            there[i] = flight(i, stnd="R9")
        elif kind == 2:
            there[i] = flight(i, flno="MU0001")
        else:
            there[i] = flight(n + i)       # this one missing there, another missing here
    return here, there


def median_s(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved(measured, floor, repeat: int) -> tuple[float, float]:
    """Medians of the two, timed turn about: on a shared machine a load that comes and goes then
    weighs on both alike, and the ratio stays meaningful."""
    a, b = [], []
    for _ in range(repeat):
        a.append(median_s(measured, 1))
        b.append(median_s(floor, 1))
    return statistics.median(a), statistics.median(b)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flights", type=int, default=10_000)
    ap.add_argument("--differ", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    names = [f"{bp.TAG}_cmp_here", f"{bp.TAG}_cmp_there"]
    key = f"flightInfo_{bp.TAG}"
    client = connect(REDIS)
    try:
        t0 = time.perf_counter()
        here_url, there_url = (bp.pg_db(n) for n in names)
        here, there = sides(args.flights, args.differ)
        for url, states in ((here_url, here), (there_url, there)):
            engine = make_engine(url)
            with engine.begin() as conn:
                FlightRepository(conn).persist_next_states(states)
            if url == there_url:
                Projection(client, key).rebuild(engine)
            engine.dispose()
        print(f"setup {time.perf_counter() - t0:.1f} s: {args.flights} flights a side, {args.differ} differing")

        outcome = run(here_url, there_url, as_json=True)
        doc = outcome.report or {}
        print(f"exit {outcome.code}: {doc['differences']['by_class']} over {doc['flights']['compared']} flights")
        redis_s = median_s(lambda: run(here_url, REDIS, key=key, as_json=True), args.repeat)

        texts_a = {s.flid: state_json(s) for s in here}
        texts_b = {s.flid: state_json(s) for s in there}

        def decoded() -> tuple[dict, dict]:
            return ({f: orjson.loads(t) for f, t in texts_a.items()}, {f: orjson.loads(t) for f, t in texts_b.items()})

        def msgx() -> dict:
            left, right = decoded()
            return report.as_json(compare(left, right), here="h", there="t")

        def floor() -> int:
            left, right = decoded()
            return sum(1 for f in left.keys() | right.keys() if left.get(f) != right.get(f))

        diff_s, floor_s = interleaved(msgx, floor, args.repeat)

        pg_s, read_s = interleaved(lambda: run(here_url, there_url, as_json=True),
                                   lambda: (read_postgresql(here_url), read_postgresql(there_url)), args.repeat)
    finally:
        client.delete(key, f"{key}:version")
        client.close()
        bp.drop(names)
    print(f"msgx compare, PostgreSQL against PostgreSQL: {pg_s:.2f} s;  against the Redis hash: {redis_s:.2f} s")
    print(f"  floor: reading both databases' documents alone {read_s:.2f} s")
    bp.report("compare_pg", "msgx compare, whole command (PostgreSQL x2) against reading both sides",
              pg_s * 1000, read_s * 1000, "ms", target=1.5)
    bp.report("compare_diff", "decode 2 x whole-state JSON, compare field by field, classify, report; against "
              "JSON decode + dict equality", diff_s * 1000, floor_s * 1000, "ms", target=2.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
