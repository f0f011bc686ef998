"""The detail rows a state's collections become (FS §9: one row per entry, in entry order, the
sequence attribute kept as ``source_seq``), as ``persist_next_states`` hands them to COPY.

Pure: ``_detail_tuples`` builds value lists from states and the catalogue; nothing is written.
"""

from __future__ import annotations

import pytest

from msgx_engine.state.model import FlightState, freeze_entry
from msgx_engine.store.flights import _DETAIL_COLUMNS, _detail_tuples


def _state(**fields) -> FlightState:
    return FlightState(flid="F1", state_version=3,
                       fields={k: tuple(freeze_entry(e) for e in v) for k, v in fields.items()})


def test_entries_become_rows_in_column_order_with_ordinals_and_versions():
    gates = [{"GTNO": "7", "GATE": "G1", "GTYP": "D"}, {"GTNO": "9", "GATE": "G2"}]
    routes = [{"RTNO": "1", "APCD": "PEK"}]
    state = _state(GTDT=gates, ROUT=routes, ERUT=[{"RTNO": "1", "APCD": "SHA"}])
    rows = [dict(zip(_DETAIL_COLUMNS["flight_gate"], r, strict=True)) for r in _detail_tuples([state], "flight_gate")]
    assert [(r["ordinal"], r["source_seq"], r["gate"], r["gtyp"], r["pgot"]) for r in rows] == [
        (1, "7", "G1", "D", None), (2, "9", "G2", None, None)]
    assert {r["flid"] for r in rows} == {"F1"} and {r["record_version"] for r in rows} == {3}
    points = [dict(zip(_DETAIL_COLUMNS["flight_route_point"], r, strict=True))
              for r in _detail_tuples([state], "flight_route_point", {"F1": 2})]
    assert [(r["route_kind"], r["apcd"], r["record_version"]) for r in points] == [
        ("ROUT", "PEK", 2), ("ERUT", "SHA", 2)]


def test_a_part_without_a_column_is_refused_by_name():
    state = _state(GTDT=[{"GTNO": "1", "GATE": "G1"}, {"GTNO": "2", "BOGUS": "x"}])
    with pytest.raises(ValueError, match="GTDT entry key 'BOGUS' has no column in flight_gate"):
        list(_detail_tuples([state], "flight_gate"))
