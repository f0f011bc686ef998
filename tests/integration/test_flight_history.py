"""A flight's history without SQL (US-12, OPS-2): `msgx history FLID` and
`GET /flights/{FLID}/history` list the flight's versions in order, each with the mailbox message
that caused it (id, TYPE/STYP, received time), what it did, the fields it changed, and whether
its events reached Kafka and Redis. Checked against a sequence of messages processed by the real
pipeline on PostgreSQL and MariaDB: a refused, a duplicate and another flight's message leave no
version; delivery states come from the outbox's send columns."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import text
from starlette.testclient import TestClient

from msgx_engine.http.app import create_app
from tests.builders import flop, gtdt
from tests.pipeline_support import drain_now, proc

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def test_history_lists_each_version_with_its_message_fields_and_delivery(app, cli_run):
    """US-12, OPS-2: four messages change flight H1 (created with gate A1, a stand, gate B7, a
    deletion); a verbatim repeat, a malformed message and another flight's message do not. The
    history has exactly versions 1-4 from those four mailbox ids in order, with their TYPE/STYP and
    registration time, the fields each changed, and per version Kafka delivered / dead / waiting as
    the outbox says; Redis written where released (or not configured). The CLI's JSON and the HTTP
    answer are the same document; an unknown FLID is exit 2 / 404."""
    first = gtdt("H1", (1, "A1"))
    created = app.mailbox.put(first)
    stand = app.mailbox.put(flop("STND", "H1", "\t\t<STND>S77</STND>\n"))
    repeat = app.mailbox.put(first)
    malformed = app.mailbox.put("<MSG><META><TYPE>FLOP</TYPE>")
    other = app.mailbox.put(gtdt("H2", (1, "C3")))
    gate = app.mailbox.put(gtdt("H1", (1, "B7")))
    deleted = app.mailbox.put(flop("FDEL", "H1", "<FDEL/>"))
    drain_now(app)
    assert [proc(app, m).status for m in (created, stand, repeat, malformed, other, gate, deleted)] == [
        "SUCCEEDED", "SUCCEEDED", "SKIPPED", "DEAD", "SUCCEEDED", "SUCCEEDED", "SUCCEEDED"]
    with app.engine.begin() as conn:    # what the dispatcher records: delivered, and given up
        conn.execute(text("UPDATE msg_event SET sent_at = now() WHERE msg_id = :m"), {"m": created})
        conn.execute(text("UPDATE msg_event SET dead_at = now(), send_error = 'refused' WHERE msg_id = :m AND "
                          "topic = 'msg'"), {"m": stand})

    code, out, err = cli_run("history", "H1", "--json")
    assert code == 0, err
    doc = json.loads(out)
    changes = doc["changes"]
    assert [(c["state_version"], c["msg_id"], c["type"], c["styp"], c["what"]) for c in changes] == [
        (1, created, "FLOP", "GTDT", "created"), (2, stand, "FLOP", "STND", "changed"),
        (3, gate, "FLOP", "GTDT", "changed"), (4, deleted, "FLOP", "FDEL", "deleted")]
    assert "GTDT" in changes[0]["fields"] and "STND" in changes[1]["fields"]
    assert changes[2]["fields"] == ["GTDT"]
    registered = {m: proc(app, m).created_at.isoformat() for m in (created, stand, gate, deleted)}
    assert [c["received_at"] for c in changes] == [registered[c["msg_id"]] for c in changes]
    # the test's settings configure no Kafka and no Redis
    assert [(c["kafka"], c["kafka_sent"], c["kafka_dead"], c["redis"]) for c in changes] == [
        ("delivered", 2, 0, "not configured"), ("dead", 0, 1, "not configured"),
        ("not configured", 0, 0, "not configured"), ("not configured", 0, 0, "not configured")]

    code, out, err = cli_run("history", "H1")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "flight H1: 4 version(s), oldest first"
    assert lines[1].split() == ["VERSION", "MAILBOX", "ID", "TYPE/STYP", "RECEIVED", "KAFKA", "REDIS", "WHAT",
                                "FIELDS"]
    assert lines[4].split()[:3] == ["3", str(gate), "FLOP/GTDT"] and lines[4].endswith("changed  GTDT")
    assert "dead" in lines[3].split()

    client = TestClient(create_app(mailbox=app.mailbox, engine=app.engine, delivery=(True, True)))
    resp = client.get("/flights/H1/history")
    assert resp.status_code == 200
    served = resp.json()["changes"]
    assert [c["kafka"] for c in served] == ["delivered", "dead", "waiting", "waiting"]
    assert [c["redis"] for c in served] == ["written"] * 4
    assert [{k: v for k, v in c.items() if k not in ("kafka", "redis")} for c in served] == [
        {k: v for k, v in c.items() if k not in ("kafka", "redis")} for c in changes]

    missing = client.get("/flights/NOPE/history")
    assert missing.status_code == 404 and missing.json()["err_code"] == "unknown_flight"
    code, out, err = cli_run("history", "NOPE")
    assert code == 2 and "no version of flight NOPE" in err


def test_the_example_messages_do_what_their_page_says(app, cli_run):
    """US-02, US-12: docs/examples/README.md's commands, literally: `msgx mailbox put` of the three
    files and `msgx pump --drain`, then `msgx history 2612059001` shows gate B7, stand 215 and the
    cancellation as versions 1-3; `POST /cminmsgs/send` of a file answers its new mailbox id, and
    the repeat is processed as a duplicate."""
    page = (EXAMPLES / "README.md").read_text()
    files = [EXAMPLES / name for name in ("flop-gtdt.xml", "flop-stnd.xml", "flop-cncl.xml")]
    assert all(f"docs/examples/{f.name}" in page for f in files)
    code, out, err = cli_run("mailbox", "put", *map(str, files))
    assert code == 0 and "inserted 3 message(s)" in out, err
    assert cli_run("pump", "--drain")[0] == 0
    code, out, err = cli_run("history", "2612059001", "--json")
    assert code == 0, err
    changes = json.loads(out)["changes"]
    assert [(c["state_version"], c["styp"], c["what"]) for c in changes] == [
        (1, "GTDT", "created"), (2, "STND", "changed"), (3, "CNCL", "changed")]
    assert "STND" in changes[1]["fields"] and changes[2]["fields"] == ["CNCL"]

    client = TestClient(create_app(mailbox=app.mailbox, engine=app.engine))
    resp = client.post("/cminmsgs/send", content=files[0].read_bytes(), headers={"Content-Type": "text/xml"})
    assert resp.status_code == 200 and resp.json()["is_success"] is True
    again = resp.json()["body"]
    drain_now(app)
    assert (proc(app, again).status, proc(app, again).reason) == ("SKIPPED", "duplicate")
