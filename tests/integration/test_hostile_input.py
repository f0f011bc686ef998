"""Hostile mailbox rows concern themselves only, on the real servers.

- item 4: a row holding bytes ED A0 80 (stored by MariaDB in strict mode) ends DEAD(malformed)
  with an ``encoding:`` detail; the 50 rows before it and after it succeed and ``msgx pump
  --drain`` exits; the replay preview (the other body read) reads it too.
- item 5: a 2,700-character SEQN on an unknown type and a 10 KB FLID or SEQN on GTDT end
  DEAD(malformed) at once (one history entry, no retry), bind no identity, and the message behind
  each succeeds in the same drain; HTTP refuses the same bodies with 400 ``invalid_field``.
- item 6: ``encoding="ISO-8859-1"`` over UTF-8 text lands as the same characters through the
  mailbox and through ``POST /cminmsgs/send`` (the declaration is ignored on both, decisions F8).
"""

from __future__ import annotations

import subprocess

import pymysql
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from msgx_engine.operations.replay import Replayer
from msgx_engine.store.flights import FlightRepository
from msgx_engine.store.queue_selection import Selection
from msgx_engine.store.tables import msg_identity
from tests.builders import envelope, flop, gtdt
from tests.conftest import MSGX_BIN
from tests.http_support import assert_refused, client_for
from tests.pipeline_support import drain_now, history, proc


def insert_bytes(mailbox_url: str, data: bytes) -> int:
    """Insert raw bytes the way a foreign writer can: MariaDB keeps ED A0 80 even in strict mode."""
    u = make_url(mailbox_url)
    conn = pymysql.connect(host=u.host, port=u.port or 3306, user=u.username, password=u.password or "",
                           database=u.database, charset="utf8mb4", autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO cminmsgs (CMINMSGS_CLOB_MSG, CMINMSGS_STATUS) VALUES (%s, 'VALID')", (data,))
            return int(cur.lastrowid)
    finally:
        conn.close()


def test_item4_an_undecodable_row_ends_dead_alone_and_pump_drain_exits(app, env_for):
    """50 rows, a row with ED A0 80 in a remark, 50 rows. ``msgx pump --drain``
    exits 0; the bad row is DEAD(malformed, MALFORMED) at once (no attempt counted), its detail says encoding
    and shows the bytes; all 100 others SUCCEEDED. The mailbox reads it within a batch, and the
    replay preview reports it as not decodable instead of failing."""
    before = [app.mailbox.put(gtdt(f"EB{i:02d}", (1, "A1"))) for i in range(50)]
    bad = insert_bytes(app.settings.mailbox_url,
                       flop("REMC", "EB99", "<REMC>late @@</REMC>").encode().replace(b"@@", b"\xed\xa0\x80"))
    after = [app.mailbox.put(gtdt(f"EB{i:02d}", (1, "B2"))) for i in range(50)]
    assert set(app.mailbox.bodies([before[-1], bad, after[0]])) == {before[-1], bad, after[0]}
    done = subprocess.run([MSGX_BIN, "pump", "--drain"], env=env_for(), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    row = proc(app, bad)
    assert (row.status, row.reason, row.error_class, row.attempts) == ("DEAD", "malformed", "MALFORMED", 0)
    assert row.error_detail.startswith("encoding:") and "ed a0 80" in row.error_detail
    assert {proc(app, m).status for m in before + after} == {"SUCCEEDED"}
    report = Replayer(app.engine, app.mailbox).preview(Selection(ids=(bad,)))
    assert [i.decoded.problem for i in report.items] == ["not decodable: malformed"]


def test_item5_oversized_identity_fields_die_at_once_and_never_stall_the_queue(app):
    """D26: each oversized body is DEAD(malformed) at once with a detail
    naming the field, no FAILED attempt, no identity bound; the good message behind each
    SUCCEEDED in the one drain; an ignored type (LDM) is still SKIPPED by its ignore rule (US-04).
    HTTP refuses the same bodies with 400 invalid_field."""
    bodies = {
        "SEQN on an unknown type": envelope("ZZZZ", "NONE", "<ZZZZ/>\n", seqn="7" * 2700),
        "FLID on GTDT": gtdt("9" * 10240, (1, "A1")),
        "SEQN on GTDT": gtdt("OV2", (1, "A1"), seqn="1" * 10240),
    }
    placed = {}
    for name, body in bodies.items():
        placed[name] = (app.mailbox.put(body), app.mailbox.put(gtdt(f"OK{len(placed)}", (1, "C3"))))
    drain_now(app)
    for name, (bad, good) in placed.items():
        row = proc(app, bad)
        assert (row.status, row.reason, row.error_class, row.attempts) == ("DEAD", "malformed", "MALFORMED", 0), name
        assert name.split()[0] in row.error_detail and "characters" in row.error_detail
        assert history(app, bad) == [("DEAD", "malformed", "MALFORMED", None)]      # no retry, no INFRA
        assert proc(app, good).status == "SUCCEEDED"
    ignored = app.mailbox.put(envelope("LDM", "NONE", "<LDM/>\n", seqn="7" * 2700))
    drain_now(app)
    assert (proc(app, ignored).status, proc(app, ignored).reason) == ("SKIPPED", "ignored:LDM-*")   # US-04
    with app.engine.connect() as conn:
        bound = conn.execute(select(msg_identity.c.msg_id, func.length(msg_identity.c.identity_hash))).all()
    assert {m for m, _ in bound} == {good for _, good in placed.values()}
    assert {n for _, n in bound} == {64}
    client = client_for(app)
    for body in bodies.values():
        assert_refused(client.post("/cminmsgs/send", content=body.encode(), headers={"Content-Type": "text/xml"}),
                       400, "invalid_field")


def test_item6_a_lying_encoding_declaration_lands_as_the_same_characters_on_both_paths(app):
    """Decisions F8: ``encoding="ISO-8859-1"`` over UTF-8 text SUCCEEDED through
    the mailbox and through HTTP, both with the remark exactly as written (no mojibake); the same
    declaration over bytes that are not UTF-8 is refused by HTTP with the error JSON."""
    remark = "航班延误 Café Ünïcödé"

    def lying(flid: str) -> str:
        return flop("REMC", flid, f"<REMC>{remark}</REMC>").replace('encoding="UTF-8"', 'encoding="ISO-8859-1"')

    via_mailbox = app.mailbox.put(lying("LY1"))
    resp = client_for(app).post("/cminmsgs/send", content=lying("LY2").encode(), headers={"Content-Type": "text/xml"})
    assert resp.status_code == 200, resp.text
    drain_now(app)
    assert {proc(app, m).status for m in (via_mailbox, resp.json()["body"])} == {"SUCCEEDED"}
    with app.engine.connect() as conn:
        states = FlightRepository(conn).load(["LY1", "LY2"])
    assert {f: s.fields["REMC"] for f, s in states.items()} == {"LY1": remark, "LY2": remark}
    latin1 = lying("LY3").encode("utf-8").replace(remark.encode(), "Café".encode("latin-1"))
    assert_refused(client_for(app).post("/cminmsgs/send", content=latin1, headers={"Content-Type": "text/xml"}),
                   400, "invalid_utf8")
