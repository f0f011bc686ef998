"""A code-share child's own changes update and notify its master (US-05 AC4: "共享航班通常更新并通知
主航班，不直接发共享通知", decision L6). Real PostgreSQL and MariaDB mailbox, through the pump."""

from __future__ import annotations

import json

from builders import flop, gtdt
from snapshot_builders import dnld, fltr, sodt
from sqlalchemy import text

from msgx_engine.state.model import FlightState
from msgx_engine.store.flights import FlightRepository
from tests.pipeline_support import drain_now, proc

MASTER, CHILD = "9101", "9102"


def family(app) -> None:
    """Master and child of one day, written by a snapshot (version 1 each)."""
    app.mailbox.put(dnld(fltr(MASTER, sodt(9), flno="CA9101"),
                         fltr(CHILD, sodt(9), flno="MU9102", extra=f"<MAID>{MASTER}</MAID>")))
    drain_now(app)


def flights(app) -> dict[str, FlightState]:
    with app.engine.connect() as conn:
        return FlightRepository(conn).load([MASTER, CHILD])


def events(app, msg_id: int) -> list[tuple[str, str, dict]]:
    with app.engine.connect() as conn:
        rows = conn.execute(text("SELECT flid, topic, payload FROM msg_event WHERE msg_id = :m ORDER BY event_id"),
                            {"m": msg_id}).fetchall()
    return [(r.flid, r.topic, json.loads(r.payload)) for r in rows]


def test_a_childs_gate_change_updates_and_notifies_its_master(app):
    """US-05 AC4, INV-21, decision L6: GTDT on the child sets the same gates on its master (new
    version, the master's msg names them, its schd state carries them); the child keeps them too
    and publishes its schd state, but no msg of its own."""
    family(app)
    before = flights(app)
    changed = app.mailbox.put(gtdt(CHILD, (1, "A1")))
    drain_now(app)
    assert proc(app, changed).status == "SUCCEEDED"
    after = flights(app)
    assert [dict(e) for e in after[MASTER].entries("GTDT")] == [dict(e) for e in after[CHILD].entries("GTDT")]
    assert after[MASTER].entries("GTDT")[0]["GATE"] == "A1"
    assert after[MASTER].state_version == before[MASTER].state_version + 1
    assert after[CHILD].state_version == before[CHILD].state_version + 1
    published = events(app, changed)
    msgs = [(flid, doc) for flid, topic, doc in published if topic == "msg"]
    assert [flid for flid, _ in msgs] == [MASTER]
    assert msgs[0][1]["CHANGES"]["GTDT"][0]["GATE"] == "A1"
    assert msgs[0][1]["STATE_VERSION"] == after[MASTER].state_version
    schd = {flid: doc for flid, topic, doc in published if topic == "schd"}
    assert set(schd) == {MASTER, CHILD}
    assert schd[MASTER]["GTDT"][0]["GATE"] == "A1" and schd[CHILD]["MAID"] == MASTER


def test_a_childs_scalar_change_reaches_its_master_but_its_identity_does_not(app):
    """Decision L6: a time or stand on the child goes to the master; the child's own FLNO does not
    (it only moves the master's MAFL entry), and the master's msg announces both."""
    family(app)
    stand = app.mailbox.put(flop("STND", CHILD, "\t\t<STND>S77</STND>\n"))
    renamed = app.mailbox.put(flop("FLNO", CHILD, "\t\t<FLNO>MU9999</FLNO>\n"))
    drain_now(app)
    assert proc(app, stand).status == proc(app, renamed).status == "SUCCEEDED"
    after = flights(app)
    assert after[MASTER].get("STND") == after[CHILD].get("STND") == "S77"
    assert after[MASTER].get("FLNO") == "CA9101" and after[CHILD].get("FLNO") == "MU9999"
    assert [dict(e) for e in after[MASTER].entries("MAFL")] == [{"ALCD": "YG", "FLID": CHILD, "FLNO": "MU9999"}]
    assert [flid for flid, topic, _ in events(app, stand) if topic == "msg"] == [MASTER]
    renamed_msgs = [(flid, doc["CHANGES"]) for flid, topic, doc in events(app, renamed) if topic == "msg"]
    assert [flid for flid, _ in renamed_msgs] == [MASTER] and "MAFL" in renamed_msgs[0][1]


def test_the_masters_own_newer_change_is_not_rewound_by_an_equal_child(app):
    """Decision L6, US-05 AC5: a child change that leaves its master as it is (the master already
    holds those values) writes no new master version and no event for it."""
    family(app)
    app.mailbox.put(gtdt(MASTER, (1, "B2")))
    drain_now(app)
    version = flights(app)[MASTER].state_version
    same = app.mailbox.put(gtdt(CHILD, (1, "B2")))
    drain_now(app)
    assert proc(app, same).status == "SUCCEEDED"
    assert flights(app)[MASTER].state_version == version
    assert [flid for flid, topic, _ in events(app, same) if topic == "msg"] == []
