"""FLOP benchmark (DESIGN §6): pump throughput per subtype and for a mixed FLOP stream,
against a raw floor measured in the same run.

* protocol: messages in a MariaDB mailbox drained by ``App.pump`` (intake, head, decode, identity,
  handler, transaction 1 with the whole-flight write, transaction 2, backfill mark).
* floor: the same state transaction per message by a minimal psycopg loop: lock-read the flight
  row and its 9 detail tables, upsert the row with the subtype's columns, rewrite the touched
  detail group, insert the two outbox rows, commit.

Per subtype: a homogeneous batch through the pump (msg/s). Mixed: one interleaved stream through
the pump and through the floor, and their ratio. Every message changes a value, so none is a
no-op. Usage: ``.venv/bin/python bench/bench_flop.py [--per-subtype 100] [--mixed 1000]``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import psycopg

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

import bench_pump as bp  # noqa: E402
from builders import flop  # noqa: E402

from msgx_engine.app import App  # noqa: E402
from msgx_engine.config import Settings  # noqa: E402
from msgx_engine.mailbox.tables import cminmsgs  # noqa: E402
from msgx_engine.pipeline.pump import PumpOptions  # noqa: E402
from msgx_engine.sis.fields import COLLECTION_BY_KEY  # noqa: E402
from msgx_engine.store.tables import detail_tables  # noqa: E402


def _rows(tag: str, n: int, i: int, children: tuple[str, ...], seq: str | None) -> list[dict[str, str]]:
    return [{**({seq: str(k)} if seq else {}), children[0]: f"{tag}{i % 97}-{k}"} for k in range(1, n + 1)]


# subtype -> (payload builder, floor description) per message index i.
def payload(styp: str, i: int) -> tuple[str, dict, tuple[str, list[dict]] | None]:
    """(XML payload, main-row columns, (detail table, rows) or None) for message i."""
    if styp in ("STND", "ACFT", "EOBT"):
        v = f"{styp[0]}{i}"
        return f"<{styp}>{v}</{styp}>", {styp.lower(): v}, None
    if styp == "HNAG":
        return (f"<FHAG>F{i}</FHAG><PHAG>P{i}</PHAG><MHAG>M{i}</MHAG>",
                {"fhag": f"F{i}", "phag": f"P{i}", "mhag": f"M{i}"}, None)
    if styp == "FDIV":
        return (f'<FDIV DDES="HKG" DDIR="TO">R{i}</FDIV>',
                {"fdiv_ddes": "HKG", "fdiv_ddir": "TO", "fdiv_text": f"R{i}"}, None)
    if styp == "SRVT":
        entries = [{"SRTC": "ATN", "SRQT": str(i % 9)}, {"SRTC": "ATL", "SRQT": "1"}]
        xml = "".join(f"<SRVT><SRTC>{e['SRTC']}</SRTC><SRQT>{e['SRQT']}</SRQT></SRVT>" for e in entries)
        return xml, {"srvt_text": json.dumps(entries)}, None
    spec = COLLECTION_BY_KEY[styp]
    if spec.text:
        rows = [{"CODE": f"{k}{i % 9}", "TEXT": f"d{i}"} for k in (1, 2)]
        xml = "".join(f'<DELY CODE="{r["CODE"]}">{r["TEXT"]}</DELY>' for r in rows)
        return xml, {}, (spec.table, [{"code": r["CODE"], "text": r["TEXT"]} for r in rows])
    rows = _rows(styp[:1], 3 if styp == "ERUT" else 2, i, spec.children, spec.seq_attr)
    xml = "".join(f'<{styp} {spec.seq_attr}="{r[spec.seq_attr]}"><{spec.children[0]}>{r[spec.children[0]]}'
                  f"</{spec.children[0]}></{styp}>" for r in rows)
    detail = [{"source_seq": r[spec.seq_attr], spec.children[0].lower(): r[spec.children[0]],
               **({"route_kind": spec.route_kind} if spec.route_kind else {})} for r in rows]
    return xml, {}, (spec.table, detail)


SUBTYPES = ("STND", "ACFT", "EOBT", "HNAG", "FDIV", "SRVT", "GTDT", "CKDT", "DELY", "ERUT")


def workload(styps: tuple[str, ...], n: int, flights: int, start: int = 0) -> list[tuple[str, str, tuple]]:
    out = []
    for i in range(start, start + n):
        styp = styps[i % len(styps)]
        flid = f"BF{i % flights:05d}"
        xml, cols, detail = payload(styp, i)
        out.append((styp, flop(styp, flid, xml), (flid, cols, detail)))
    return out


def pump_batch(settings: Settings, work) -> float:
    # A fresh App per batch: the pump's session advisory lock stays on its pooled connection after
    # run() returns, so a second pump on the same engine would find the lock taken.
    app = App.from_settings(settings)
    with app.mailbox.engine.begin() as conn:
        for s in range(0, len(work), 1000):
            conn.execute(cminmsgs.insert(), [{"CMINMSGS_CLOB_MSG": x, "CMINMSGS_STATUS": "VALID"}
                                            for _, x, _ in work[s:s + 1000]])
    t0 = time.perf_counter()
    summary = app.pump(PumpOptions()).run()
    elapsed = time.perf_counter() - t0
    app.dispose()
    assert summary.processed.get("SUCCEEDED") == len(work), summary.processed
    return elapsed


def floor(pg_url: str, work) -> float:
    dsn = pg_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn) as conn:
        t0 = time.perf_counter()
        for msg_id, (_, _, (flid, cols, detail)) in enumerate(work, start=1):
            row = conn.execute("SELECT * FROM flight_schd WHERE flid = %s FOR UPDATE", (flid,)).fetchone()
            for table in detail_tables:
                conn.execute(f"SELECT * FROM {table} WHERE flid = %s ORDER BY ordinal", (flid,)).fetchall()
            version = (row[2] if row else 0) + 1
            names = ["flid", "state_version", "last_message_id", *cols]
            sets = ", ".join(f"{c} = excluded.{c}" for c in names[1:])
            conn.execute(f"INSERT INTO flight_schd ({', '.join(names)}) VALUES ({', '.join(['%s'] * len(names))}) "
                         f"ON CONFLICT (flid) DO UPDATE SET {sets}, updated_at = now()",
                         (flid, version, msg_id, *cols.values()))
            with conn.cursor() as cur:
                if detail:
                    table, rows = detail
                    conn.execute(f"DELETE FROM {table} WHERE flid = %s", (flid,))
                    keys = list(rows[0])
                    cur.executemany(
                        f"INSERT INTO {table} (flid, ordinal, record_version, {', '.join(keys)}) "
                        f"VALUES (%s, %s, %s, {', '.join(['%s'] * len(keys))})",
                        [(flid, o, version, *r.values()) for o, r in enumerate(rows, start=1)])
                payload_json = json.dumps({"FLID": flid, **cols})
                cur.executemany("INSERT INTO msg_event (msg_id, flid, topic, kind, state_version, payload) "
                                "VALUES (%s, %s, %s, %s, %s, %s)",
                                [(msg_id, flid, "msg", "change", version, payload_json),
                                 (msg_id, flid, "schd", "state", version, payload_json)])
            conn.commit()
        return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-subtype", type=int, default=100)
    ap.add_argument("--mixed", type=int, default=1000)
    ap.add_argument("--flights", type=int, default=200)
    args = ap.parse_args()
    names = [f"{bp.TAG}_p", f"{bp.TAG}_f"]
    try:
        pg_proto, pg_floor = bp.pg_db(names[0]), bp.pg_db(names[1])
        settings = Settings(db_url=pg_proto, mailbox_url=bp.mysql_db(bp.TAG), kafka_bootstrap=None,
                            redis_url=None, home=Path("/tmp") / bp.TAG)
        App.from_settings(settings).check_ready()
        print(f"per subtype ({args.per_subtype} messages each over {args.flights} flights, full protocol):")
        start = 0
        for styp in SUBTYPES:
            work = workload((styp,), args.per_subtype, args.flights, start)
            start += len(work)
            print(f"  {styp:5s} {len(work) / pump_batch(settings, work):8.0f} msg/s")
        mixed = workload(SUBTYPES, args.mixed, args.flights, start)
        proto_s = pump_batch(settings, mixed)
        floor_s = floor(pg_floor, mixed)
    finally:
        bp.drop(names)
    n = len(mixed)
    print(f"mixed stream: {n} messages of {len(SUBTYPES)} subtypes over {args.flights} flights")
    print(f"  raw floor (psycopg state transaction): {n / floor_s:8.0f} msg/s  ({floor_s:.2f}s)")
    print(f"  full protocol (mailbox -> terminal+mark): {n / proto_s:8.0f} msg/s  ({proto_s:.2f}s)")
    print(f"  ratio protocol/floor: {floor_s / proto_s:.2f}  (DESIGN target >= 0.5 for GTDT)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
