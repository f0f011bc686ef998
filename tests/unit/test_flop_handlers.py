"""FLOP/FDEL/ADFT handlers: pure decisions, and the code-share cascade's atomicity on real servers.

The golden cases (test_flop_golden.py) pin the five faces of each subtype; these tests state the
rules behind them directly, so a wrong golden cannot hide a broken rule.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest
from builders import envelope, flop, state

from msgx_engine.handlers.changes import effective, next_state
from msgx_engine.handlers.codeshare import ChildRef, delete_flights
from msgx_engine.handlers.decision import APPLY, DEAD, SKIP, FlightChange
from msgx_engine.handlers.flop import SUBTYPE_ELEMENTS, SUPPORTED_SUBTYPES, handle_fdel, handle_flop
from msgx_engine.sis.catalogue import FLOP_SUBTYPES
from msgx_engine.sis.decode import SisRefused, decode
from msgx_engine.state.model import Clear, FlightState, Set, freeze_entry


def test_every_catalogue_subtype_has_a_handler_and_grouped_shapes_are_kept():
    """US-05 AC1: all 48 catalogue FLOP subtypes plus the FLTR-only ones; grouped payloads keep
    their shape (EXSS, HNAG, TAOP, VIPP)."""
    assert FLOP_SUBTYPES <= SUPPORTED_SUBTYPES
    assert {"ESTT", "ACTT", "PAXC", "CSOP", "CSFT", "MAID", "LBNO", "LBWT"} <= SUPPORTED_SUBTYPES
    assert SUBTYPE_ELEMENTS["HNAG"] == ("FHAG", "PHAG", "MHAG")
    assert SUBTYPE_ELEMENTS["TAOP"] == ("TAOP", "TAFL", "TAID")
    assert "FFID" not in SUBTYPE_ELEMENTS and "TAFL" not in SUBTYPE_ELEMENTS


def test_present_absent_empty_follow_d7():
    """FS §5.2, D7, INV-14b: present -> Set, empty -> Clear, other fields untouched."""
    msg = decode(flop("HNAG", "F1", "\t\t<FHAG>A1</FHAG>\n\t\t<PHAG></PHAG>\n").encode())
    decision = handle_flop(msg, {"F1": state("F1", PHAG="P", MHAG="M")})
    assert decision.outcome == APPLY
    (change,) = decision.changes
    assert Set("FHAG", "A1") in change.commands and Clear("PHAG") in change.commands
    assert not any(c.key == "MHAG" for c in change.commands)


def test_blocks_for_one_flid_become_one_change_in_input_order():
    """A flight is written once per message; the later block wins (FS §5.3 order)."""
    body = "".join(f"\t<FLOP>\n\t\t<FLID>F1</FLID>\n\t\t<STND>{s}</STND>\n\t</FLOP>\n" for s in ("S1", "S2"))
    decision = handle_flop(decode(envelope("FLOP", "STND", body).encode()), {})
    (change,) = decision.changes
    assert [c.value for c in change.commands if isinstance(c, Set)] == ["S1", "S2"]


@pytest.mark.parametrize("payload, named", [
    ("\t\t<STND>S1</STND>\n\t\t<GATE>G1</GATE>\n", "FLOP/GATE is not in the catalogue"),
    ("\t\t<STND>S1</STND>\n\t\t<RENO>B1</RENO>\n", "FLOP/RENO is not part of subtype STND"),
    ("\t\t<STND>S1</STND>\n\t\tjunk\n", "stray text 'junk'"),
    ('\t\t<STND X="1">S1</STND>\n', "STND has attributes"),
    ("\t\t<STND>S1</STND>\n\t\t<STND>S2</STND>\n", "STND appears 2 times"),
])
def test_nothing_is_dropped_silently(payload, named):
    """G-FLOP-UNMAPPED: anything without a place makes the message DEAD(malformed), named."""
    decision = handle_flop(decode(flop("STND", "F1", payload).encode()), {})
    assert decision.outcome == DEAD and decision.reason == "malformed"
    assert named in decision.detail


def test_whitespace_is_not_content():
    """G-FLOP-UNMAPPED exception: whitespace between elements is fine."""
    decision = handle_flop(decode(flop("STND", "F1", "\n\n\t\t<STND> S1 </STND>\n   \n").encode()), {})
    assert decision.outcome == APPLY and Set("STND", "S1") in decision.changes[0].commands


def test_missing_flid_and_unknown_subtype():
    """US-03 AC2 / D8: an empty FLID is malformed (refused by decoding already); an unknown subtype
    is SKIPPED(unsupported)."""
    with pytest.raises(SisRefused, match="malformed"):
        decode(flop("STND", "", "<STND>S</STND>").encode())
    skipped = handle_flop(decode(flop("XXXX", "F1", "<XXXX>1</XXXX>").encode()), {})
    assert skipped.outcome == SKIP and skipped.reason == "unsupported"


def test_invalid_enumeration_is_dead():
    """FDIV@DDIR must be TO/FROM."""
    decision = handle_flop(decode(flop("FDIV", "F1", '<FDIV DDES="HKG" DDIR="TOO">X</FDIV>').encode()), {})
    assert decision.outcome == DEAD and "DDIR" in decision.detail


def _port(flid: str, *entries: tuple[str, str]) -> str:
    body = "".join(f"\t\t<PORT><POTM>{t}</POTM><POID>{p}</POID></PORT>\n" for t, p in entries)
    return flop("PORT", flid, body or "\t\t<PORT></PORT>\n")


def _ported(before: FlightState, body: str, message_id: int = 9) -> FlightState:
    """The state a PORT message leads to from ``before`` (the decision applied by mailbox id)."""
    decision = handle_flop(decode(flop("PORT", before.flid, body)), {before.flid: before})
    assert decision.outcome == APPLY
    result = next_state(decision.changes[0], before, message_id)
    assert result is not None
    return result.state


def _port_entry(poid: str, potm: str):
    return freeze_entry({"POID": poid, "POTM": potm})


def test_port_keeps_open_and_close_side_by_side():
    """PORT (catalogue: peer keeps port_open_time and port_close_time): a message replaces only the
    entry of its own POID; POTM empty clears that POID; an empty PORT clears both; a POID other
    than O/C is DEAD(malformed) (G-FLOP-UNMAPPED)."""
    before = FlightState(flid="P1", fields=MappingProxyType({"PORT": (_port_entry("O", "10AUG181855"),)}),
                         state_version=1)
    both = _ported(before, "\t\t<PORT><POTM>10AUG182030</POTM><POID>C</POID></PORT>\n")
    assert both.entries("PORT") == (_port_entry("O", "10AUG181855"), _port_entry("C", "10AUG182030"))
    reopen = _ported(both, "\t\t<PORT><POTM></POTM><POID>C</POID></PORT>\n", message_id=10)
    assert reopen.entries("PORT") == (_port_entry("O", "10AUG181855"),)
    cleared = handle_flop(decode(_port("P1")), {"P1": both})
    assert Clear("PORT") in cleared.changes[0].commands
    bad = handle_flop(decode(_port("P1", ("10AUG181855", "X"))), {"P1": both})
    assert bad.outcome == DEAD and "POID" in (bad.detail or "")


def test_a_late_older_port_entry_of_another_poid_still_lands():
    """F6, decision L7: each POID is its own last-writer register. The close time (mailbox id 12)
    is processed before an older open time (id 11) that committed late: the open time lands all
    the same, and both arrival orders give the same PORT and the same stamps. An older entry of the
    same POID stays skipped."""
    fresh = FlightState(flid="P1")
    open_body = "\t\t<PORT><POTM>10AUG181855</POTM><POID>O</POID></PORT>\n"
    close_body = "\t\t<PORT><POTM>10AUG182030</POTM><POID>C</POID></PORT>\n"
    in_order = _ported(_ported(fresh, open_body, 11), close_body, 12)
    late = _ported(_ported(fresh, close_body, 12), open_body, 11)
    assert late.entries("PORT") == in_order.entries("PORT") == (
        _port_entry("O", "10AUG181855"), _port_entry("C", "10AUG182030"))
    assert {k: late.stamp(k) for k in ("PORT/O", "PORT/C")} == {"PORT/O": 11, "PORT/C": 12}
    assert {k: in_order.stamp(k) for k in ("PORT/O", "PORT/C")} == {"PORT/O": 11, "PORT/C": 12}
    older_close = _ported(late, "\t\t<PORT><POTM>10AUG180000</POTM><POID>C</POID></PORT>\n", 10)
    assert older_close.entries("PORT") == late.entries("PORT")


def test_no_ops_reach_the_pipeline_but_change_nothing_a_reader_sees():
    """US-05 AC5 value-equal comparison; FS §5.4 unknown flight; INV-29 only ADFT restores. F6: such
    changes are kept (they stamp their keys, and a deleted flight's hidden fields still move), but
    nothing a reader sees changes: ``visible`` is False, so no version and no event."""
    live, gone = state("F1", STND="S1"), state("F1", deleted=True, STND="S1")
    same = FlightChange("F1", (Set("STND", "S1"),))
    assert effective(same, live) == same and not _visible(same, live)
    assert effective(same, None) == same and _visible(same, None)               # creates
    assert effective(replace(same, create=False), None) is None
    hidden = next_state(FlightChange("F1", (Set("STND", "S2"),)), gone, 5)
    assert hidden is not None and hidden.state.deleted and hidden.state.get("STND") == "S2"
    assert not hidden.visible(gone)                                             # deleted: no visible effect
    assert _visible(replace(same, undelete=True), gone)                         # ADFT restores
    assert not _visible(FlightChange("F1", (Clear("GTDT"),)), live)             # clearing nothing


def _visible(change: FlightChange, before) -> bool:
    result = next_state(change, before, 5)
    assert result is not None
    return result.visible(before or FlightState.new(change.flid))


def test_delete_cascade_rules():
    """INV-21, US-05 AC4, C-25, decision C3: a master, stored or not, takes its live children with
    it; a child goes alone (its master's MAFL is re-derived by refresh_masters,
    tests/unit/test_codeshare_rules.py)."""
    flights = {"M": state("M"), "C1": state("C1", MAID="M"), "C2": state("C2", MAID="M")}
    children = {"M": (ChildRef("C1"), ChildRef("C2")), "C1": (), "C2": ()}
    assert [(c.flid, c.delete) for c in delete_flights(["C1"], flights, children)] == [("C1", True)]
    master = delete_flights(["M"], flights, children)
    assert [(c.flid, c.delete, c.create) for c in master] == [("M", True, False), ("C1", True, False),
                                                              ("C2", True, False)]
    assert [(c.flid, c.delete) for c in delete_flights(["NOPE"], flights, children)] == [("NOPE", True)]  # tombstone
    deleted_master = {**flights, "M": replace(flights["M"], deleted=True)}
    assert [c.flid for c in delete_flights(["M"], deleted_master, {"M": ()})] == ["M"]   # re-stamped
    # decision C3: a missing or deleted master still takes the live children that name it
    assert [c.flid for c in delete_flights(["M"], deleted_master, children)] == ["M", "C1", "C2"]
    assert [c.flid for c in delete_flights(["M"], {"C1": flights["C1"]}, {"M": (ChildRef("C1"),)})] == ["M", "C1"]
    assert len(delete_flights(["C1", "M"], flights, children)) == 3     # each flight once


def test_fdel_marker_must_be_empty():
    """FDEL peer rule: a non-empty marker is malformed, never a delete."""
    decision = handle_fdel(decode(flop("FDEL", "F1", "<FDEL>x</FDEL>").encode()), {"F1": state("F1")}, {})
    assert decision.outcome == DEAD


