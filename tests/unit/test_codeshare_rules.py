"""D30, INV-21/22, C-25, US-05 AC4: the pure code-share rules (MAFL derived from the children's
MAID; which masters a message touches; the refresh a message needs). The same rules run through
the real pipeline in the golden cases tests/golden/CODESHARE/, FDEL/codeshare_*, ADFT/codeshare_child."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from msgx_engine.handlers.changes import merge_changes, transitions
from msgx_engine.handlers.codeshare import (
    ChildRef,
    announced_by_master,
    cascade,
    children_after,
    derived_mafl,
    mafl,
    masters_to_derive,
    masters_to_notify,
    may_notify_masters,
    may_touch_masters,
    notify_masters,
    own_record_wins,
    refresh_masters,
    shared_commands,
    strip_derived,
    touched_masters,
)
from msgx_engine.handlers.decision import FlightChange
from msgx_engine.handlers.snapshot import held_masters
from msgx_engine.state.model import Clear, FlightState, Replace, Set, freeze_entry


def state(flid: str, *, deleted: bool = False, **fields) -> FlightState:
    frozen = {k: tuple(freeze_entry(e) for e in v) if isinstance(v, list) else v for k, v in fields.items()}
    return FlightState(flid, MappingProxyType(dict(sorted(frozen.items()))), deleted=deleted)


def entry(flid: str, alcd: str, flno: str):
    return freeze_entry({"FLID": flid, "ALCD": alcd, "FLNO": flno})


def test_d30_mafl_is_one_entry_per_child_in_flid_order():
    """D30: FLID numeric order for digit FLIDs; ALCD/FLNO from the child's own fields, absent ones left out."""
    refs = [ChildRef("100", "MU", "MU1"), ChildRef("9", "FM", "FM9"), ChildRef("12", None, None)]
    assert mafl(refs) == (entry("9", "FM", "FM9"), freeze_entry({"FLID": "12"}), entry("100", "MU", "MU1"))
    assert mafl([]) == ()


def test_d30_touched_masters():
    """D30: a child's create, restore, delete, MAID change and ALCD/FLNO change touch its masters;
    any other change does not, and neither does anything on a flight that is no child."""
    child = state("C", MAID="M", ALCD="MU", FLNO="MU1")
    assert touched_masters(None, child) == {"M"}                                       # created
    assert touched_masters(replace(child, deleted=True), child) == {"M"}              # restored
    assert touched_masters(child, replace(child, deleted=True)) == {"M"}              # deleted
    assert touched_masters(child, state("C", MAID="N", ALCD="MU", FLNO="MU1")) == {"M", "N"}
    assert touched_masters(child, state("C", MAID="M", ALCD="MU", FLNO="MU2")) == {"M"}
    assert touched_masters(child, state("C", MAID="M", ALCD="MU", FLNO="MU1", STND="1")) == set()
    assert touched_masters(state("P", STND="1"), state("P", STND="2")) == set()
    assert touched_masters(state("C", MAID="M"), state("C")) == {"M"}                 # MAID cleared


def test_d30_derived_mafl_uses_the_messages_view_of_its_flights():
    """D30: stored children the message did not touch, plus the message's live children of the master."""
    stored = {"M": (ChildRef("1", "MU", "MU1"), ChildRef("2", "FM", "FM2"))}
    after = {"2": state("2", deleted=True, MAID="M"), "3": state("3", MAID="M", ALCD="HU", FLNO="HU3"),
             "4": state("4", MAID="N")}
    assert derived_mafl("M", stored, after, children_after(after)) == (entry("1", "MU", "MU1"), entry("3", "HU", "HU3"))


def test_d30_refresh_masters():
    """D30: a moved child refreshes both masters; a master written by the message is compared with
    its state after the message; a deleted master and a flight whose children were not read are
    left alone; a master not loaded gets an unconditional create=False change."""
    flights = {"M": state("M", MAFL=[entry("1", "MU", "MU1")]), "1": state("1", MAID="M", ALCD="MU", FLNO="MU1")}
    moved = {"1": (flights["1"], state("1", MAID="N", ALCD="MU", FLNO="MU1"))}
    stored = {"M": (ChildRef("1", "MU", "MU1"),), "N": ()}
    changes = refresh_masters(moved, flights, stored)
    assert [(c.flid, c.commands, c.create) for c in changes] == [
        ("M", (Replace("MAFL", ()),), False), ("N", (Replace("MAFL", (entry("1", "MU", "MU1"),)),), False)]
    assert refresh_masters(moved, flights, {"N": ()})[0].flid == "N"                  # M's children unread
    gone = {**moved, "M": (flights["M"], replace(flights["M"], deleted=True))}
    assert [c.flid for c in refresh_masters(gone, flights, stored)] == ["N"]
    untouched = {"1": (flights["1"], state("1", MAID="M", ALCD="MU", FLNO="MU1", STND="9"))}
    assert refresh_masters(untouched, flights, stored) == []


def test_d30_created_and_restored_flights_get_the_mafl_of_waiting_children():
    """D30: a master created (or restored) after its children gets their MAFL."""
    moves = transitions([FlightChange("M", (Set("FLNO", "CA1"),))], {})
    assert masters_to_derive(moves) == {"M"}
    (change,) = refresh_masters(moves, {}, {"M": (ChildRef("7", "MU", "MU7"),)})
    assert change.commands == (Replace("MAFL", (entry("7", "MU", "MU7"),)),)
    assert merge_changes([FlightChange("M", (Set("FLNO", "CA1"),))], [change])[0].commands == (
        Set("FLNO", "CA1"), Replace("MAFL", (entry("7", "MU", "MU7"),)))


def test_d30_carried_mafl_is_not_stored_and_cascade_lists_live_children():
    """D30 / docs/decisions.md C1: MAFL commands are dropped from messages; C-25 cascade order."""
    assert strip_derived([Set("STND", "1"), Replace("MAFL", ())]) == [Set("STND", "1")]
    assert cascade(["M", "X"], {"M": (ChildRef("10"), ChildRef("9")), "X": ()}) == ["9", "10"]


def test_d30_only_changes_that_can_touch_a_master_cost_a_look():
    """D30 refresh stays free for ordinary messages: a change to a plain live flight that does not
    set MAID is not looked at; a child, a MAID command, a new or a restored flight is."""
    plain, kid = state("P", STND="1"), state("C", MAID="M")
    flights = {"P": plain, "C": kid, "D": state("D", deleted=True)}
    gate = (Set("STND", "2"),)
    assert not may_touch_masters([FlightChange("P", gate)], flights)
    assert may_touch_masters([FlightChange("C", gate)], flights)
    assert may_touch_masters([FlightChange("P", (Set("MAID", "M"),))], flights)
    assert may_touch_masters([FlightChange("N", gate)], flights)
    assert may_touch_masters([FlightChange("D", gate, undelete=True)], flights)


def test_c4_a_childs_shared_change_goes_to_its_master():
    """US-05 AC4, decision C4: a live child's change to a shared field becomes the same change on
    its master; its identity fields, a created, restored, moved or deleted child, and a master the
    message deletes get none."""
    before = state("C", MAID="M", ALCD="MU", FLNO="MU1", STND="1", EOBT="09SEP260800")
    after = state("C", MAID="M", ALCD="MU", FLNO="MU2", STND="2")
    changes = notify_masters({"C": (before, after)}, {})
    assert [(c.flid, c.commands, c.create) for c in changes] == [("M", (Clear("EOBT"), Set("STND", "2")), False)]
    assert masters_to_notify({"C": (before, after)}) == {"M"}
    assert shared_commands(before, replace(before, fields=MappingProxyType({**before.fields, "FLNO": "X"}))) == ()
    assert notify_masters({"C": (None, after)}, {}) == []                                   # created
    assert notify_masters({"C": (replace(before, deleted=True), after)}, {}) == []          # restored
    assert notify_masters({"C": (before, state("C", MAID="N", STND="2"))}, {}) == []        # moved
    gone = {"C": (before, after), "M": (state("M"), state("M", deleted=True))}
    assert notify_masters(gone, {}) == []
    assert may_notify_masters([FlightChange("C", ())], {"C": before})
    assert not may_notify_masters([FlightChange("P", ())], {"P": state("P", STND="1")})


def test_c4_the_marketing_flights_fields_stay_with_the_child():
    """Decision C4: a child's PAXC, CSOP, CSFT, LBNO/LBWT, TAOP/TAFL/TAID and ALSC are its own
    marketing flight's; only the operated flight's fields (a stand here) reach its master."""
    before = state("C", MAID="M", STND="1")
    after = state("C", MAID="M", STND="2", PAXC="20", CSOP="CA", CSFT="CA1", LBNO="3", LBWT="40", TAOP="MU",
                  TAFL="MU5", TAID="77", ALSC="X")
    assert shared_commands(before, after) == (Set("STND", "2"),)


def test_c4_the_masters_own_record_in_the_message_wins():
    """Decision C4: a key the master's own change in the message carries is taken off what its
    child passes on (whichever comes first); a passed change left empty is dropped; MAFL
    refreshes and flights the message does not change are untouched."""
    own = [FlightChange("M", (Set("PAXC", "151"), Replace("GTDT", ()))), FlightChange("C", (Set("STND", "9"),))]
    passed = [FlightChange("M", (Set("STND", "9"), Replace("GTDT", (freeze_entry({"GATE": "B2"}),))), create=False),
              FlightChange("N", (Set("STND", "9"),), create=False)]
    assert own_record_wins(own, passed) == [FlightChange("M", (Set("STND", "9"),), create=False), passed[1]]
    assert own_record_wins(own, [FlightChange("M", (Replace("GTDT", ()),), create=False)]) == []
    mafl_ = FlightChange("M", (Replace("MAFL", ()),), create=False)
    assert own_record_wins(own, [mafl_]) == [mafl_]


def test_c4_a_child_is_announced_by_a_live_master_only():
    """Decision C4: the child's own msg is left out only while it stays the child of a live master."""
    before, after = state("C", MAID="M", STND="1"), state("C", MAID="M", STND="2")
    assert announced_by_master(before, after, {"M": state("M")})
    assert not announced_by_master(before, after, {})
    assert not announced_by_master(before, after, {"M": state("M", deleted=True)})
    assert not announced_by_master(None, after, {"M": state("M")})


def test_l5_a_snapshot_keeps_a_master_whose_child_stays():
    """INV-21, decision L5: a diff-delete candidate stays when the package writes a live child
    naming it, or leaves a stored live child as it is (a member not written); a master whose
    children all go is not held."""
    stored = {"M": (ChildRef("C1"), ChildRef("C2")), "N": (ChildRef("C3"),), "P": (ChildRef("C4"),)}
    written = [state("C1", MAID="M"), state("C9", MAID="Q")]
    members = frozenset({"C1", "C3", "C9"})
    assert held_masters(["M", "N", "P"], members, written, stored) == (("M", ("C1",)), ("N", ("C3",)))
    assert held_masters([], members, written, stored) == ()
    moved = [state("C1", MAID="Z")]                           # the package moves C1 to another master
    assert held_masters(["M"], frozenset({"C1"}), moved, stored) == ()
