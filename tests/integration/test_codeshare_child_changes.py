"""A code-share child's own changes update and notify its master (US-05 AC4: "共享航班通常更新并通知
主航班，不直接发共享通知", decision C4). Real PostgreSQL and MariaDB mailbox, through the pump."""

from __future__ import annotations

import json

from builders import flop, gtdt
from snapshot_builders import dnld, fltr, schd, sodt
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
    """US-05 AC4, INV-21, decision C4: GTDT on the child sets the same gates on its master (new
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
    """Decision C4: a time or stand on the child goes to the master; the child's own FLNO does not
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
    """Decision C4, US-05 AC5: a child change that leaves its master as it is (the master already
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


def marketing(paxc: str, gate: str | None = None) -> str:
    """A child's FLTR fields that describe its marketing flight (and a gate, which does not)."""
    gtdt_ = f'<GTDT GTNO="1"><GATE>{gate}</GATE></GTDT>' if gate else ""
    return f"<MAID>{MASTER}</MAID><PAXC>{paxc}</PAXC><CSOP>CA</CSOP><CSFT>CA9101</CSFT><LBNO>7</LBNO>{gtdt_}"


def test_adft_with_the_masters_record_and_the_childs_keeps_the_masters_own(app):
    """US-05 AC4, decision C4 (L6 superseded): one ADFT with the master's record (PAXC=151, gate A1)
    and its child's (PAXC=20, gate B2, stand S9, CSOP/CSFT/LBNO): the master keeps its own PAXC and
    gate, takes the child's stand (its record does not carry one), and none of the child's
    marketing fields; the child holds its own (before: the master ended PAXC=20, gate B2, CSOP)."""
    family(app)
    both = app.mailbox.put(schd("ADFT", fltr(MASTER, sodt(9), flno="CA9101", stnd=None,
                                              extra='<PAXC>151</PAXC><GTDT GTNO="1"><GATE>A1</GATE></GTDT>'),
                                fltr(CHILD, sodt(9), flno="MU9102", stnd="S9", extra=marketing("20", "B2"))))
    drain_now(app)
    assert proc(app, both).status == "SUCCEEDED"
    after = flights(app)
    master, child = after[MASTER], after[CHILD]
    assert (master.get("PAXC"), master.entries("GTDT")[0]["GATE"], master.get("STND")) == ("151", "A1", "S9")
    assert [master.get(k) for k in ("CSOP", "CSFT", "LBNO", "MAID")] == [None] * 4
    assert (child.get("PAXC"), child.get("CSOP"), child.get("LBNO"), child.entries("GTDT")[0]["GATE"]) == (
        "20", "CA", "7", "B2")


def test_flop_blocks_for_master_and_child_and_a_childs_count_alone(app):
    """US-05 AC4, decision C4: a FLOP/PAXC with a block for the master (151) and one for its child
    (20) leaves the master at 151; a later FLOP/PAXC for the child alone changes the child only:
    the master gets no version and no event (before: 20, then the child's count)."""
    family(app)
    blocks = flop("PAXC", MASTER, "\t\t<PAXC>151</PAXC>\n").replace(
        "</FLOP>\n", f"</FLOP>\n\t<FLOP>\n\t\t<FLID>{CHILD}</FLID>\n\t\t<PAXC>20</PAXC>\n\t</FLOP>\n", 1)
    both = app.mailbox.put(blocks)
    drain_now(app)
    assert proc(app, both).status == "SUCCEEDED"
    after = flights(app)
    assert (after[MASTER].get("PAXC"), after[CHILD].get("PAXC")) == ("151", "20")
    version = after[MASTER].state_version
    alone = app.mailbox.put(flop("PAXC", CHILD, "\t\t<PAXC>30</PAXC>\n"))
    drain_now(app)
    assert proc(app, alone).status == "SUCCEEDED"
    after = flights(app)
    assert (after[MASTER].get("PAXC"), after[MASTER].state_version, after[CHILD].get("PAXC")) == ("151", version, "30")
    assert [flid for flid, _, _ in events(app, alone)] == [CHILD, CHILD]


def test_a_days_snapshot_writes_master_and_child_each_with_its_own_record(app):
    """US-05 AC4, decision C4, D1: a DNLD listing the master (PAXC=151) and its stored child
    (PAXC=20, CSOP/CSFT/LBNO, gate B2) writes each flight's own record: nothing of the child's
    reaches the master, which keeps 151 and no gate."""
    family(app)
    day = app.mailbox.put(dnld(fltr(MASTER, sodt(9), flno="CA9101", extra="<PAXC>151</PAXC>"),
                               fltr(CHILD, sodt(9), flno="MU9102", extra=marketing("20", "B2"))))
    drain_now(app)
    assert proc(app, day).status == "SUCCEEDED"
    after = flights(app)
    assert (after[MASTER].get("PAXC"), after[MASTER].get("CSOP"), after[MASTER].entries("GTDT")) == ("151", None, ())
    assert (after[CHILD].get("PAXC"), after[CHILD].get("CSFT")) == ("20", "CA9101")
