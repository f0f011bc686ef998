"""Late arrivals that must converge, through the real pipeline on PostgreSQL and the MariaDB mailbox
(docs/decisions.md F6, L7, L8; FS §5.3, US-01 AC5, INV-29):

- a PORT entry is a register of its own per POID, so an older open time that commits after a newer
  close time still lands (L7);
- a flight an ADFT brings back joins its day's member list again, so the day's next full package can
  diff-delete it, and a late package that spares a flight a newer message restored keeps it a
  member (L8).

Rows with explicit ids model inserts that commit out of order; the ManualClock expires the gap grace.
The pure rules and their arrival-order property test: tests/unit/test_lww_properties.py.
"""

from __future__ import annotations

import json

from builders import envelope, flop
from snapshot_builders import dnld, fltr, members, sodt
from sqlalchemy import text

from msgx_engine.mailbox.tables import cminmsgs
from tests.pipeline_support import drain_now, events, proc

DAY = 9


def _put_at(app, msg_id: int, body: str) -> None:
    with app.mailbox.engine.connect() as conn:
        conn.execute(cminmsgs.insert().values(CMINMSGS_ID=msg_id, CMINMSGS_CLOB_MSG=body, CMINMSGS_STATUS="VALID"))


def _late(app, clock, first: dict[int, str], late: dict[int, str] | None = None) -> None:
    """Process ``first`` (the head passes the gaps after their grace), then the ``late`` rows."""
    for msg_id, body in first.items():
        _put_at(app, msg_id, body)
    drain_now(app)
    clock.advance(10)
    drain_now(app)
    for msg_id, body in (late or {}).items():
        _put_at(app, msg_id, body)
    clock.advance(1)
    drain_now(app)


def _flight(app, flid: str) -> dict:
    with app.engine.connect() as conn:
        row = conn.execute(text("SELECT state_version, deleted, fday, port_text, field_msg FROM flight_schd "
                                "WHERE flid = :f"), {"f": flid}).one()
    return dict(row._mapping)


def _port(flid: str, poid: str, potm: str) -> str:
    return flop("PORT", flid, f"\t\t<PORT><POTM>{potm}</POTM><POID>{poid}</POID></PORT>\n")


def _adft(flid: str) -> str:
    """A SCHD-ADFT record (an increment, D21) for a flight of ``DAY`` with the mandatory fields."""
    return envelope("SCHD", "ADFT", f"<SCHD><FLTR><FLID>{flid}</FLID><ALCD>YG</ALCD><FLNO>YG{flid[-4:]}</FLNO>"
                                    f"<MVIN>D</MVIN><SODT>{sodt(DAY)}</SODT><FLTY>W</FLTY><FLIN>D</FLIN>"
                                    f"<ACFT>733</ACFT><STND>R1</STND></FLTR></SCHD>\n")


def _ports(flight: dict) -> list[tuple[str, str]]:
    return [(e["POID"], e["POTM"]) for e in json.loads(flight["port_text"] or "[]")]


def test_a_late_older_port_open_time_lands_after_a_newer_close_time(app, clock):
    """The issue's case (L7): the close time (id 12) is processed first, the older open time (id 11)
    commits late. Before, the POID merge was stamped as one PORT key and the open time was dropped
    as stale; now it lands, announced by its own change, and the flight holds what id order gives:
    both times, each stamped by its own message. An older close time (id 10, late too) stays out."""
    _late(app, clock, {5: flop("STND", "LC1", "\t\t<STND>S1</STND>\n"), 12: _port("LC1", "C", "10AUG182030")},
          {10: _port("LC1", "C", "10AUG180000"), 11: _port("LC1", "O", "10AUG181855")})
    assert proc(app, 11).status == "SUCCEEDED" and proc(app, 11).late_arrival
    flight = _flight(app, "LC1")
    assert _ports(flight) == [("O", "10AUG181855"), ("C", "10AUG182030")]
    assert flight["field_msg"]["PORT/O"] == 11 and flight["field_msg"]["PORT/C"] == 12
    assert flight["state_version"] == 3          # created, close time, late open time
    assert [e.topic for e in events(app, 11)] == ["msg", "schd"] and events(app, 10) == []


def test_port_in_id_order_gives_the_same_flight(app, clock):
    """The same three PORT messages in id order end with the same times and stamps (F6, L7)."""
    _late(app, clock, {5: flop("STND", "LC2", "\t\t<STND>S1</STND>\n"), 10: _port("LC2", "C", "10AUG180000"),
                       11: _port("LC2", "O", "10AUG181855"), 12: _port("LC2", "C", "10AUG182030")})
    flight = _flight(app, "LC2")
    assert _ports(flight) == [("O", "10AUG181855"), ("C", "10AUG182030")]
    assert flight["field_msg"]["PORT/O"] == 11 and flight["field_msg"]["PORT/C"] == 12


def test_a_flight_an_adft_restores_can_be_diff_deleted_by_its_days_next_package(app, clock):
    """L8, FS §3.3: the day's package drops LC4 (diff-deleted, out of the member list); an ADFT
    brings it back (INV-29) and puts it in its day's member list again; the day's next package,
    which still leaves it out, deletes it. Before, the restored flight stayed out of the list and
    no later package could ever delete it."""
    _late(app, clock, {1: dnld(fltr("LC3", sodt(DAY)), fltr("LC4", sodt(DAY))),
                       2: dnld(fltr("LC3", sodt(DAY)))})
    assert _flight(app, "LC4")["deleted"] and "LC4" not in members(app)[_flight(app, "LC4")["fday"]]
    _late(app, clock, {3: _adft("LC4")})
    restored = _flight(app, "LC4")
    assert not restored["deleted"] and proc(app, 3).status == "SUCCEEDED"
    assert members(app)[restored["fday"]] == {"LC3", "LC4"}
    _late(app, clock, {4: dnld(fltr("LC3", sodt(DAY)))})
    assert _flight(app, "LC4")["deleted"] and members(app)[restored["fday"]] == {"LC3"}
    assert ("LC4", "schd") in [(e.flid, e.topic) for e in events(app, 4)]


def test_a_late_package_that_spares_a_newer_restore_keeps_it_a_member(app, clock):
    """L8 with F6: the package of id 2 (leaving LC6 out) commits after an ADFT of id 3 that wrote
    LC6's deletion flag. Id order: 2 deletes LC6, 3 restores it and puts it back in the list. Late:
    2 spares LC6 (its restore is newer) and keeps it a member. Either way the day's next package
    (id 5, still without LC6) deletes it."""
    _late(app, clock, {1: dnld(fltr("LC5", sodt(DAY)), fltr("LC6", sodt(DAY))), 3: _adft("LC6")},
          {2: dnld(fltr("LC5", sodt(DAY)))})
    spared = _flight(app, "LC6")
    assert proc(app, 2).status == "SUCCEEDED" and not spared["deleted"]
    assert members(app)[spared["fday"]] == {"LC5", "LC6"}
    _late(app, clock, {5: dnld(fltr("LC5", sodt(DAY)))})
    assert _flight(app, "LC6")["deleted"]
