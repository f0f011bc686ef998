"""Stand -> airbridge derivation, purely (US-14 AC2/AC3, US-05 AC6, D27)."""

from __future__ import annotations

import json
from types import MappingProxyType

from hypothesis import given
from hypothesis import strategies as st

from msgx_engine.state.bridges import (
    bridge_map,
    changed_stands,
    derive,
    from_column,
    needs_derivation,
    stands_of,
    to_column,
)
from msgx_engine.state.model import FlightState, freeze_entry
from msgx_engine.state.serialize import document_changes, state_document, state_from_json, state_json

# The ABDG/01_DNLD.xml sample: airbridge 212 serves stand 212, airbridge 112 serves 112 and 111.
MAPPING = bridge_map([("212", {"ABCD": "212", "STND": ["212"]}), ("112", {"ABCD": "112", "STND": ["112", "111"]}),
                      ("113", {"ABCD": "113", "STND": ["111"]}), ("900", {"ABCD": "900"})])


def flight(stnd: str | None = None, *pssts: str | None) -> FlightState:
    fields: dict = {"FLNO": "CA101"}
    if stnd:
        fields["STND"] = stnd
    if pssts:
        fields["PSDT"] = tuple(freeze_entry({"PSNO": str(n), **({"PSST": p} if p else {})})
                               for n, p in enumerate(pssts, start=1))
    return FlightState("F1", MappingProxyType(fields), state_version=1)


def test_mapping_lists_each_stand_with_its_sorted_airbridges_us14():
    assert MAPPING == {"111": ("112", "113"), "112": ("112",), "212": ("212",)}


def test_near_remote_and_shared_stands_us14_ac2():
    """Near stand -> its airbridge; remote -> []; a stand served by two airbridges -> both, sorted;
    a PSDT entry without PSST names no stand -> []; the flight-level STND gets STND_ABDG."""
    doc = state_document(derive(flight("212", "212", "R9", "111", None), MAPPING))
    assert [e["ABDG"] for e in doc["PSDT"]] == [["212"], [], ["112", "113"], []]
    assert doc["STND_ABDG"] == ["212"]


def test_unknown_mapping_is_null_never_empty_us14_ac3():
    doc = state_document(derive(flight("212", "212", None), None))
    assert [e["ABDG"] for e in doc["PSDT"]] == [None, []]
    assert doc["STND_ABDG"] is None


def test_no_stand_publishes_nothing_d27():
    state = derive(flight(), MAPPING)
    assert state.bridges is None and "STND_ABDG" not in state_document(state)
    assert stands_of(flight("B", "A", "B")) == ("A", "B")


def test_whole_state_round_trips_with_the_derived_airbridges_fs55():
    for mapping in (MAPPING, None):
        state = derive(flight("212", "111", "R9"), mapping)
        assert state_from_json(state_json(state)) == state
        assert from_column(to_column(state.bridges)) == state.bridges


@given(st.dictionaries(st.text(alphabet=st.characters(blacklist_categories=("Cs",))),
                       st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)))).map(tuple)))
def test_stored_airbridges_are_the_standard_librarys_text_d27(bridges):
    """The column's text is what ``json.dumps`` (sorted, compact, unescaped) wrote before P24's
    writer took over, so stored rows compare equal across the change."""
    assert to_column(bridges) == json.dumps({k: list(v) for k, v in bridges.items()}, sort_keys=True,
                                            ensure_ascii=False, separators=(",", ":"))
    assert from_column(to_column(bridges)) == dict(sorted(bridges.items()))


def test_a_document_without_abdg_reads_as_not_derived():
    assert state_from_json('{"FLID":"F1","PSDT":[{"PSNO":"1","PSST":"212"}],"STATE_VERSION":1}').bridges is None


def test_derivation_is_needed_when_the_stands_change_or_the_flight_is_new_or_restored_d27():
    old = derive(flight("212", "111"), MAPPING)
    assert not needs_derivation(old, old)
    assert needs_derivation(old, flight("212", "112"))
    assert needs_derivation(None, flight("212"))
    assert not needs_derivation(None, flight())
    deleted = FlightState("F1", old.fields, state_version=2, deleted=True, bridges=old.bridges)
    assert needs_derivation(deleted, old)


def test_document_changes_name_the_published_keys_the_mapping_changed_d27():
    """A mapping change alters the PSDT entries' ABDG and STND_ABDG: both keys change, nothing else."""
    before = derive(flight("212", "212"), MAPPING)
    after = derive(before, {**MAPPING, "212": ("211", "212")})
    assert document_changes(before, after) == (frozenset({"PSDT", "STND_ABDG"}), frozenset())
    assert document_changes(before, derive(before, MAPPING)) == (frozenset(), frozenset())
    cleared = derive(flight(None, "212"), MAPPING)
    assert document_changes(before, cleared) == (frozenset({"STND", "STND_ABDG"}), frozenset({"STND", "STND_ABDG"}))


def test_only_the_stands_whose_airbridges_changed_need_their_flights_rederived_d27():
    """A new mapping re-derives the flights of the stands it changes (added, removed or served by other
    airbridges), none when it changes nothing; every stand when either side was never loaded."""
    assert changed_stands(MAPPING, dict(MAPPING)) == frozenset()
    moved = {**MAPPING, "212": ("211", "212"), "300": ("301",)}
    del moved["111"]
    assert changed_stands(MAPPING, moved) == frozenset({"212", "300", "111"})
    assert changed_stands(None, MAPPING) is None and changed_stands(MAPPING, None) is None
