"""Snapshot benchmark (DESIGN §6): a 10,000-flight SCHD DNLD, registered -> terminal, vs
the floor measured in the same run.

* package: generated in the shape of ``SCHD/01_DNLD.xml`` with 2 gates, 3 check-in desks, 2 route
  points and 2 stands per flight (``tests/snapshot_builders.big_package``), about 10 MB.
* floor: lxml parse (hardened parser) + a plain extraction of every field (scalars,
  every entry of every group), independent of msgx's code + one bulk upsert of the same flights and gate rows (COPY
  into temporary tables, one ``INSERT … ON CONFLICT`` each into ``flight_schd`` and
  ``flight_gate``) on a fresh database, one commit. Two more figures are printed beside it: the
  same plain code writing everything a snapshot writes (all 10 tables and a ``schd`` document per
  flight, ``run_output_floor``), and the earlier floor, which ran msgx's own extraction
  (``block_values``, whole states, ``state_to_row``).
* protocol: the message in a fresh MariaDB mailbox, registered by one intake pass, then timed from
  there (``App.pump`` started) to the commit that makes it terminal (decode, identity, snapshot
  load, transaction 1 with ledger CAS, flights, member list and 10,000 ``schd`` events,
  transaction 2), as the floors are timed to their commit; the seconds until the pump returned
  (with the backfill mark, its last pass and its exit) are printed beside it.
* re-snapshot: a second package for the same day where 5% of the flights are new and 5% are gone
  (updates + diff soft-deletes + tombstones), timed the same way.

Every timed step starts after a ``CHECKPOINT`` (``started``), so no step pays for what the steps
before it left the server to flush. Prints seconds, rates (flights/s), floor and ratio (target
<= 2x the floor's time), the
CPU seconds of each process in each run (this one: the pump or a floor's client; the offload
helper; PostgreSQL), which the disk's flush times do not blur, with how busy the cores were, and
``RESULT`` lines for ``bench/run.py``. Usage:
``.venv/bin/python bench/bench_snapshot.py [--flights 10000] [--repeat 3] [--profile]`` (the figures: medians
of the rounds)
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pump import PG, bench_app, fresh_databases, report  # noqa: E402  (shared database setup)
from snapshot_builders import big_package  # noqa: E402

from msgx_engine.app import App  # noqa: E402
from msgx_engine.handlers.extract import block_values, text_of  # noqa: E402
from msgx_engine.handlers.snapshot import snapshot_fields  # noqa: E402
from msgx_engine.pipeline.intake import Intake  # noqa: E402
from msgx_engine.pipeline.large_bodies import offload  # noqa: E402
from msgx_engine.pipeline.pump import PumpOptions  # noqa: E402
from msgx_engine.sis.decode import _parser  # noqa: E402
from msgx_engine.sis.fields import COLLECTIONS, OBJECT_BY_KEY, OBJECTS, SCALARS, TEXT_GROUPS  # noqa: E402
from msgx_engine.state.model import FlightState  # noqa: E402
from msgx_engine.store.flights import _entry_to_row, state_to_row  # noqa: E402

TAG = f"msgx_bsnap_{uuid.uuid4().hex[:6]}"


class Timing(NamedTuple):
    """A run's wall seconds and CPU seconds: this process's (all its threads: the pump, or a
    floor's client), the offload helper's (``pipeline/large_bodies/offload.py``) and PostgreSQL's (every
    server process, read from ``/proc``). The CPU figures are each side's own cost, which the
    disk's flushes do not blur; side by side they show which one a run waits for."""

    wall: float
    cpu: float
    helper: float
    server: float


Start = tuple[float, float, float, float]


def started() -> Start:
    """The clocks at the start of a timed step, after a CHECKPOINT: every step (each floor and each
    snapshot) then starts with the server's dirty pages written, instead of paying for what the
    steps before it (and the round's four CREATE DATABASE) left to flush."""
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    return time.perf_counter(), time.process_time(), helper_cpu(), server_cpu()


def since(start: Start) -> Timing:
    return Timing(time.perf_counter() - start[0], time.process_time() - start[1],
                  max(helper_cpu() - start[2], 0.0), server_cpu() - start[3])


def _cpu_of(stat: str) -> float:
    """User + system CPU seconds from a ``/proc/<pid>/stat`` line (fields 14 and 15)."""
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def helper_cpu() -> float:
    """The offload helper's CPU seconds so far (0 when it is not running)."""
    worker = offload._worker
    if worker is None or worker.poll() is not None:
        return 0.0
    try:
        return _cpu_of(Path(f"/proc/{worker.pid}/stat").read_text())
    except OSError:
        return 0.0


def server_cpu() -> float:
    """CPU seconds of every PostgreSQL process on this machine (the server, its backends and its
    writers): the benchmark's databases are the only ones in use while it runs."""
    total = 0.0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except OSError:                 # ended meanwhile
            continue
        if stat[stat.index("(") + 1:].startswith("postgres"):
            total += _cpu_of(stat)
    return total


def copy_upsert(cur: psycopg.Cursor, table: str, cols: list[str], rows: Iterable[Sequence[object]], key: str) -> None:
    """The floors' bulk upsert: ``rows`` (values in ``cols`` order) by COPY into a temporary table,
    then one ``INSERT … ON CONFLICT (key) DO UPDATE`` into ``table``."""
    cur.execute(f"CREATE TEMP TABLE in_{table} (LIKE {table} INCLUDING DEFAULTS) ON COMMIT DROP")
    with cur.copy(f"COPY in_{table} ({', '.join(cols)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
    keys = {k.strip() for k in key.split(",")}
    cur.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(cols)} FROM in_{table} "
                f"ON CONFLICT ({key}) DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in cols if c not in keys))


def plain_record(fltr: Any, scalars: frozenset[str], *, own_text: bool = False
                 ) -> tuple[dict[str, str], dict[str, list[dict[str, str]]]]:
    """The floors' plain extraction of one FLTR, with no catalogue checks: its scalars (and FLID)
    by tag, and every repeated group and object as entries of its attributes and child texts.
    ``own_text``: an element's own text is an entry part too (``TEXT``), as the output floor
    stores it; the raw floor leaves it out."""
    values: dict[str, str] = {}
    groups: dict[str, list[dict[str, str]]] = {}
    for child in fltr:
        if child.tag in scalars or child.tag == "FLID":
            values[child.tag] = (child.text or "").strip()
        else:
            entry = {k: v.strip() for k, v in child.items()}
            entry.update((g.tag, (g.text or "").strip()) for g in child)
            if own_text and (child.text or "").strip():
                entry["TEXT"] = child.text.strip()
            groups.setdefault(child.tag, []).append(entry)
    return values, groups


def run_plain_floor(pg_url: str, xml: str) -> Timing:
    """The raw floor, independent of msgx's own code: lxml parse, a plain extraction of every
    field (scalars, and every entry of every group with its attributes; no catalogue checks, no
    state objects), and one bulk upsert
    of the same flights and gate rows (COPY into temporary tables, one ``INSERT … ON CONFLICT``
    each), one commit. Speeding up msgx's extraction shows against this floor."""
    from lxml import etree

    dsn = pg_url.replace("postgresql+psycopg://", "postgresql://")
    scalars = frozenset(SCALARS)
    gate_spec = next(spec for spec in COLLECTIONS if spec.table == "flight_gate")
    main_cols = ["flid", "state_version", *(name.lower() for name in SCALARS)]
    gate_cols = ["flid", "ordinal", "source_seq", "record_version", *(c.lower() for c in gate_spec.children)]
    with psycopg.connect(dsn) as conn:
        t0 = started()
        root = etree.fromstring(xml.encode("utf-8"), _parser())
        flights: list[list[object]] = []
        gates: list[list[object]] = []
        for fltr in root.iterfind("SCHD/FLTR"):
            values, groups = plain_record(fltr, scalars)
            flid = values["FLID"]
            flights.append([flid, 1, *(values.get(name) or None for name in SCALARS)])
            gates += [[flid, ordinal, entry.get(gate_spec.seq_attr or ""), 1,
                       *(entry.get(c) or None for c in gate_spec.children)]
                      for ordinal, entry in enumerate(groups.get(gate_spec.key, ()), start=1)]
        with conn.cursor() as cur:
            copy_upsert(cur, "flight_schd", main_cols, flights, "flid")
            copy_upsert(cur, "flight_gate", gate_cols, gates, "flid, ordinal")
        conn.commit()
        return since(t0)


def run_output_floor(pg_url: str, xml: str) -> Timing:
    """A third figure, beside the raw floor: the same plain code writing everything a snapshot
    must write. The raw floor writes the main rows and one detail table; a snapshot writes every
    field of every flight (the main row with its objects and text groups, the rows of all 9 detail
    tables) and one whole-state ``schd`` document per flight (FS §3.3, §5.5). So this floor takes
    the same parse and plain extraction, builds the rows of all 10 tables and a sorted, compact
    JSON document per flight, and writes them the same bulk way (COPY into temporary tables, one
    ``INSERT … ON CONFLICT`` each; the documents by COPY into ``msg_event``), one commit. No
    catalogue checks, no ledger, no identity, no member list, no status: it shows how much of
    msgx's time the output itself costs."""
    import json

    from lxml import etree

    dsn = pg_url.replace("postgresql+psycopg://", "postgresql://")
    scalars = frozenset(SCALARS)
    main_cols = ["flid", "fday", "state_version", *(name.lower() for name in SCALARS),
                 *(c for obj in OBJECTS for c in obj.columns), *(g.column for g in TEXT_GROUPS)]
    detail: dict[str, tuple[list[str], list[list[object]]]] = {}
    for spec in COLLECTIONS:
        keys = ["flid", *(["route_kind"] if spec.route_kind else []), "ordinal", "source_seq", "record_version"]
        cols, _ = detail.setdefault(spec.table, (keys, []))
        cols += [c for c in spec.columns if c not in cols]
    with psycopg.connect(dsn) as conn:
        t0 = started()
        root = etree.fromstring(xml.encode("utf-8"), _parser())
        day: str | None = None
        flights: list[list[object]] = []
        documents: list[tuple[object, ...]] = []
        for fltr in root.iterfind("SCHD/FLTR"):
            values, groups = plain_record(fltr, scalars, own_text=True)
            flid = values.pop("FLID")
            if day is None:      # the package's day, from its first SODT (DDMONYYHHMM)
                day = datetime.strptime(values["SODT"][:7].title(), "%d%b%y").date().isoformat()
            fday = day
            objects = [((groups.get(obj.key) or [{}])[0], obj.parts) for obj in OBJECTS]
            flights.append([flid, fday, 1, *(values.get(name) or None for name in SCALARS),
                            *(o.get(part) or None for o, parts in objects for part in parts),
                            *(json.dumps(groups[g.key], ensure_ascii=False, sort_keys=True) if g.key in groups else None
                              for g in TEXT_GROUPS)])
            for spec in COLLECTIONS:
                cols, rows = detail[spec.table]
                for ordinal, entry in enumerate(groups.get(spec.key, ()), start=1):
                    row = {"flid": flid, "route_kind": spec.route_kind, "ordinal": ordinal, "record_version": 1,
                           "source_seq": entry.get(spec.seq_attr or "")}
                    rows.append([row[c] if c in row else entry.get(c.upper()) or None for c in cols])
            document: dict[str, object] = {"FLID": flid, "STATE_VERSION": 1, "FDAY": fday,
                                           **{k: v for k, v in values.items() if v}}
            document.update((k, v[0] if k in OBJECT_BY_KEY else v) for k, v in groups.items())
            documents.append((1, flid, "schd", "state", 1,
                              json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)))
        with conn.cursor() as cur:
            copy_upsert(cur, "flight_schd", main_cols, flights, "flid")
            for table, (cols, rows) in detail.items():
                key = "flid, route_kind, ordinal" if "route_kind" in cols else "flid, ordinal"
                copy_upsert(cur, table, cols, rows, key)
            with cur.copy("COPY msg_event (msg_id, flid, topic, kind, state_version, payload) FROM STDIN") as copy:
                for doc in documents:
                    copy.write_row(doc)
        conn.commit()
        return since(t0)


def run_floor(pg_url: str, xml: str) -> Timing:
    """The earlier floor, kept as a second figure: parse + msgx's own extraction (``block_values``,
    whole states, ``state_to_row``) + one bulk upsert of the same flights and gate rows. Since it
    runs msgx's extraction, a faster extraction lowers it too and never shows in its ratio."""
    from lxml import etree

    dsn = pg_url.replace("postgresql+psycopg://", "postgresql://")
    gate_spec = next(spec for spec in COLLECTIONS if spec.table == "flight_gate")
    with psycopg.connect(dsn) as conn:
        t0 = started()
        root = etree.fromstring(xml.encode("utf-8"), _parser())
        states = [FlightState(flid=text_of(r.find("FLID")), fields=snapshot_fields(block_values(r)), state_version=1)
                  for r in root.iterfind("SCHD/FLTR")]
        rows = [state_to_row(s) for s in states]
        gates = [_entry_to_row(gate_spec, s.flid, ordinal, entry, 1)
                 for s in states for ordinal, entry in enumerate(s.fields.get(gate_spec.key) or (), start=1)]
        with conn.cursor() as cur:
            for table, trows, key in (("flight_schd", rows, "flid"), ("flight_gate", gates, "flid, ordinal")):
                cols = list(trows[0])
                copy_upsert(cur, table, cols, ([r[c] for c in cols] for r in trows), key)
        conn.commit()
        return since(t0)


class Protocol(NamedTuple):
    """One snapshot through the pump: ``terminal`` up to the commit that made it terminal (the
    pump's ``on_release``), the point the floors end at too (their commit); ``returned``, the wall
    seconds until ``Pump.run`` returned, with the mailbox mark, the pump's last idle pass, its
    exit and, since P30, the freeing of the package's objects."""

    terminal: Timing
    returned: float


def run_protocol(app: App, xml: str, profile: bool) -> Protocol:
    """One snapshot from registered to terminal (and marked) through the full protocol."""
    msg_id = app.mailbox.put(xml)
    with app.engine.connect() as conn:
        Intake(app.mailbox, app.clock).scan(conn)
    prof = cProfile.Profile() if profile else None
    terminal: list[Timing] = []
    t0 = started()
    if prof:
        prof.enable()
    summary = app.pump(PumpOptions(), on_release=lambda: terminal.append(since(t0))).run()
    if prof:
        prof.disable()
    returned = time.perf_counter() - t0[0]
    assert summary.processed.get("SUCCEEDED") == 1, f"{summary.processed} for mailbox id {msg_id}"
    assert len(terminal) == 1, f"{len(terminal)} terminal commits for one message"
    if prof:
        pstats.Stats(prof).sort_stats(os.environ.get("MSGX_PROFILE_SORT", "cumulative")).print_stats(40)
    return Protocol(terminal[0], returned)


def counts(app: App) -> str:
    with app.engine.connect() as conn:
        row = conn.exec_driver_sql(
            "SELECT (SELECT count(*) FROM flight_schd WHERE NOT deleted), (SELECT count(*) FROM flight_schd "
            "WHERE deleted), (SELECT count(*) FROM msg_event), (SELECT string_agg(version::text, ',') FROM schd_gen)"
        ).one()
    return f"live={row[0]} deleted={row[1]} events={row[2]} versions={row[3]}"


class Round(NamedTuple):
    """One round's timings: the three floors and the two snapshots, and the tables after each."""

    floor: Timing
    msgx_floor: Timing
    output: Timing
    snapshot: Timing
    resnapshot: Timing
    snapshot_returned: float
    resnapshot_returned: float
    after_first: str
    after_second: str


def one_round(first: str, second: str, profile: bool) -> Round:
    """Fresh databases, the floors on the first package, then the two snapshots through msgx."""
    tag = f"{TAG}_{uuid.uuid4().hex[:4]}"
    with fresh_databases(tag, "p", "f", "g", "o") as ((pg_proto, pg_floor, pg_plain, pg_output), mb):
        floor_t = run_plain_floor(pg_plain, first)
        msgx_floor_t = run_floor(pg_floor, first)
        output_t = run_output_floor(pg_output, first)
        app = bench_app(pg_proto, mb, tag)
        first_t = run_protocol(app, first, profile)
        after_first = counts(app)
        second_t = run_protocol(app, second, False)
        after_second = counts(app)
        app.dispose()
    return Round(floor_t, msgx_floor_t, output_t, first_t.terminal, second_t.terminal, first_t.returned,
                 second_t.returned, after_first, after_second)


def median_timing(timings: Sequence[Timing]) -> Timing:
    return Timing(*(statistics.median(values) for values in zip(*timings, strict=True)))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--flights", type=int, default=10_000)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--repeat", type=int, default=3,
                    help="rounds, each on fresh databases; the figures are the medians (a shared machine's "
                         "disk and CPU vary by more than a code change moves them: one round's ratio moved "
                         "between 1.3x and 2.4x within a minute, run 30)")
    args = ap.parse_args()
    offload.warm_up()          # its start-up imports (once per pump process) fall before the first run
    n = args.flights
    first = big_package(n)
    churn = n // 20
    second = big_package(n, flids=[f"F{i:06d}" for i in range(churn, n)] + [f"N{i:06d}" for i in range(churn)])
    print(f"package: {n} flights, {len(first.encode()) / 1e6:.1f} MB, 2 gates + 3 desks + 2 routes + 2 stands each")
    rounds: list[Round] = []
    for i in range(args.repeat):
        r = one_round(first, second, args.profile and i == 0)
        rounds.append(r)
        if args.repeat > 1:
            print(f"round {i + 1}/{args.repeat}: floor {r.floor.wall:.2f} s, snapshot {r.snapshot.wall:.2f} s "
                  f"({r.snapshot.wall / r.floor.wall:.2f}x; {r.snapshot_returned:.2f} s until the pump returned), "
                  f"re-snapshot {r.resnapshot.wall:.2f} s ({r.resnapshot.wall / r.floor.wall:.2f}x)", flush=True)
    floor_t, msgx_floor_t, output_t, first_t, second_t = (
        median_timing([getattr(r, f) for r in rounds]) for f in ("floor", "msgx_floor", "output", "snapshot",
                                                                  "resnapshot"))
    if args.repeat > 1:
        print(f"medians of {args.repeat} rounds:")
    floor, snap, resnap = floor_t.wall, first_t.wall, second_t.wall
    report("snapshot", f"snapshot, new day (registered -> terminal) [{rounds[-1].after_first}]", n / snap, n / floor,
           "flights/s", target=0.5)
    report("resnapshot", f"re-snapshot, 5% new + 5% gone, same day [{rounds[-1].after_second}]", n / resnap, n / floor,
           "flights/s", target=0.5)
    print(f"seconds: floor {floor:.2f}, snapshot {snap:.2f} ({snap / floor:.2f}x), "
          f"re-snapshot {resnap:.2f} ({resnap / floor:.2f}x); target <= 2x")
    snap_ret, resnap_ret = (statistics.median(getattr(r, f) for r in rounds)
                            for f in ("snapshot_returned", "resnapshot_returned"))
    print(f"until the pump returned (the mark, its last pass, its exit and the package's objects freed): "
          f"snapshot {snap_ret:.2f} s ({snap_ret / floor:.2f}x), re-snapshot {resnap_ret:.2f} s "
          f"({resnap_ret / floor:.2f}x)")
    output = output_t.wall
    print(f"against the floor that writes the same output ({output:.2f} s: all 10 tables and a document "
          f"per flight): snapshot {snap / output:.2f}x, re-snapshot {resnap / output:.2f}x")
    print(f"against the floor with msgx's own extraction ({msgx_floor_t.wall:.2f} s): snapshot "
          f"{snap / msgx_floor_t.wall:.2f}x, re-snapshot {resnap / msgx_floor_t.wall:.2f}x")
    print(f"CPU seconds of this process (the server and the disk left out): floor {floor_t.cpu:.2f}, same-output "
          f"floor {output_t.cpu:.2f}, snapshot {first_t.cpu:.2f} ({first_t.cpu / floor_t.cpu:.2f}x), "
          f"re-snapshot {second_t.cpu:.2f} ({second_t.cpu / floor_t.cpu:.2f}x)")
    cores = os.cpu_count() or 1
    for name, t in (("floor", floor_t), ("snapshot", first_t), ("re-snapshot", second_t)):
        total = t.cpu + t.helper + t.server
        print(f"CPU seconds per process, {name}: this process {t.cpu:.2f}, helper {t.helper:.2f}, PostgreSQL "
              f"{t.server:.2f}; all {total:.2f} on {cores} cores ({total / (cores * t.wall):.0%} busy over "
              f"{t.wall:.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
