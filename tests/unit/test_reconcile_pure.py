"""The reconciliation report of a daily snapshot, purely: from the (FLID, field) pairs that differ
and the old/new states of the examples to counts, examples, added and deleted flights."""

from __future__ import annotations

from datetime import date
from types import MappingProxyType

from msgx_engine.handlers.reconcile import EXAMPLES, HEADLINE, examples, reconcile
from msgx_engine.state.model import FlightState, freeze_entry

D9 = date(2026, 9, 9)


def state(flid: str, **fields) -> FlightState:
    return FlightState(flid, MappingProxyType(dict(sorted(fields.items()))), fday=D9, state_version=2)


def test_counts_per_field_with_old_and_new_values():
    """Per field: flights that differ and examples with old/new (null when absent, collections as
    lists); a flight with several differing fields counts once in ``differing``."""
    gate = (freeze_entry({"GTNO": "1", "GATE": "A1"}),)
    before = {"A": state("A", STND="501"), "B": state("B", STND="502", GTDT=gate)}
    written = [state("A", STND="509"), state("B", STND="502", REMC="x"), state("C", STND="503")]
    report = reconcile(D9, "DNLD", 3, written, ["A", "B", "C"], [("A", "STND"), ("B", "REMC"), ("B", "GTDT")],
                       before, (), 0)
    assert (report.compared, report.differing, report.added, report.deleted) == (3, 2, (), ())
    doc = report.as_json()
    assert doc["fields"] == {
        "GTDT": {"flights": 1, "examples": [{"FLID": "B", "old": [{"GATE": "A1", "GTNO": "1"}], "new": None}]},
        "REMC": {"flights": 1, "examples": [{"FLID": "B", "old": None, "new": "x"}]},
        "STND": {"flights": 1, "examples": [{"FLID": "A", "old": "501", "new": "509"}]}}
    assert doc["top_fields"] == "GTDT=1, REMC=1, STND=1" and set(HEADLINE) <= set(doc)


def test_added_deleted_and_later_flights():
    """Added: written without a live row before (not compared); deleted: the diff delete, sorted."""
    report = reconcile(D9, "RESP", 4, [state("NEW"), state("OLD")], ["OLD"], [], {}, ("Z2", "Z1"), 2)
    assert (report.added, report.deleted, report.compared, report.differing) == (("NEW",), ("Z1", "Z2"), 1, 0)
    headline = report.headline()
    assert (headline["added"], headline["deleted"], headline["kept_later"], headline["fields_differing"]) == (
        1, 2, 2, 0)


def test_examples_stop_at_twenty_the_count_does_not():
    flids = [f"F{i:03d}" for i in range(50)]
    pairs = [(f, "STND") for f in reversed(flids)]
    assert examples(pairs) == {"STND": flids[:EXAMPLES]}
    before = {f: state(f, STND="1") for f in flids}
    drift = reconcile(D9, "DNLD", 50, [state(f, STND="2") for f in flids], flids, pairs, before, (), 0).fields["STND"]
    assert drift.flights == 50 and [e["FLID"] for e in drift.examples] == flids[:EXAMPLES]
