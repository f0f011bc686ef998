"""Last writer wins by mailbox id (docs/decisions.md F6, FS §5.3): a row that commits late with a
smaller id never rewinds newer state, and any arrival order of a flight's messages converges to
the state of the in-order run.

Hypothesis draws a flight's messages over the real catalogue (FLOP-like increments that create the
flight, FDEL deletions, ADFT-like restores, whole-state snapshots) and applies them through the
pure transition ``apply_change`` in id order and in a random permutation (late arrivals).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from msgx_engine.state.model import (
    BASE,
    DELETED,
    OBJECT_KEYS,
    SCALAR_KEYS,
    Clear,
    Command,
    FlightState,
    Replace,
    Set,
    apply,
    apply_change,
    freeze_entry,
    full_state_commands,
)

SCALARS = sorted(SCALAR_KEYS)[:3]
LIST_KEY = "GTDT"
OBJECT_KEY = sorted(OBJECT_KEYS)[0]
KEYS = [*SCALARS, LIST_KEY, OBJECT_KEY]
values = st.sampled_from(["A", "B", "C"])


@dataclass(frozen=True)
class Msg:
    """One message's change to the flight (what a handler's FlightChange carries)."""

    kind: str                       # flop | fdel | adft | snapshot
    commands: tuple[Command, ...]

    @property
    def create(self) -> bool:
        return self.kind != "fdel"


def command(key: str) -> st.SearchStrategy[Command]:
    if key == LIST_KEY:
        gates = st.lists(values, max_size=2).map(
            lambda gs: tuple(freeze_entry({"GTNO": str(i + 1), "GATE": g}) for i, g in enumerate(gs)))
        return gates.map(lambda e: Replace(key, e))
    if key == OBJECT_KEY:
        return st.one_of(st.just(Clear(key)), values.map(lambda v: Set(key, freeze_entry({"_": v}))))
    return st.one_of(st.just(Clear(key)), values.map(lambda v: Set(key, v)))


@st.composite
def message(draw) -> Msg:
    kind = draw(st.sampled_from(["flop", "flop", "flop", "fdel", "adft", "snapshot"]))
    if kind == "fdel":
        return Msg(kind, ())
    keys = draw(st.lists(st.sampled_from(KEYS), unique=True, min_size=1, max_size=4))
    cmds = [draw(command(k)) for k in keys]
    if kind == "snapshot":      # a whole state (D1): every other key cleared
        fields = apply(FlightState.new("F"), cmds, message_id=None).state.fields
        return Msg(kind, tuple(full_state_commands(fields)))
    return Msg(kind, tuple(cmds))


def _run(order: list[int], msgs: list[Msg]) -> FlightState | None:
    state: FlightState | None = None
    for i in order:
        m = msgs[i]
        result = apply_change(state, "F", m.commands, message_id=i + 1, create=m.create,
                              delete=m.kind == "fdel", undelete=m.kind in ("adft", "snapshot"))
        if result is not None:
            state = result.state
    return state


@settings(max_examples=400, deadline=None)
@given(msgs=st.lists(message(), min_size=1, max_size=7), data=st.data())
def test_any_arrival_order_converges_to_the_in_order_state(msgs: list[Msg], data) -> None:
    """F6: the flight exists or not, is deleted or not, and holds exactly the fields (hidden ones
    of a deleted flight included) and stamps of the in-order run, whatever order the messages
    arrive in."""
    order = data.draw(st.permutations(range(len(msgs))))
    in_order = _run(list(range(len(msgs))), msgs)
    late = _run(list(order), msgs)
    assert (in_order is None) == (late is None)
    if in_order is None or late is None:
        return
    assert late.deleted == in_order.deleted
    assert late.fields == in_order.fields
    assert {k: late.stamp(k) for k in (*KEYS, DELETED)} == {k: in_order.stamp(k) for k in (*KEYS, DELETED)}


@settings(max_examples=300, deadline=None)
@given(msgs=st.lists(message().filter(lambda m: m.kind in ("flop", "snapshot")), min_size=1, max_size=7),
       data=st.data())
def test_without_deletions_fields_and_stamps_converge_exactly(msgs: list[Msg], data) -> None:
    """Field-level LWW alone: every key ends with the value and the stamp of the largest id that
    carried it, in any order."""
    order = data.draw(st.permutations(range(len(msgs))))
    in_order, late = _run(list(range(len(msgs))), msgs), _run(list(order), msgs)
    assert in_order is not None and late is not None
    assert late.fields == in_order.fields
    assert {k: late.stamp(k) for k in KEYS} == {k: in_order.stamp(k) for k in KEYS}


def test_late_message_applies_what_nobody_newer_touched():
    """Message 2 set the gates; message 1 arrives after it carrying gates and a stand: the stand is
    applied, the gates stay message 2's (stale), and the stand is stamped 1."""
    newer = apply(FlightState.new("F"), [Replace("GTDT", (freeze_entry({"GTNO": "1", "GATE": "NEW"}),))],
                  message_id=2).state
    late = apply(newer, [Replace("GTDT", (freeze_entry({"GTNO": "1", "GATE": "OLD"}),)), Set(SCALARS[0], "S1")],
                 message_id=1)
    assert late.state.entries("GTDT")[0]["GATE"] == "NEW" and late.stale == {"GTDT"}
    assert late.state.get(SCALARS[0]) == "S1" and late.state.stamp(SCALARS[0]) == 1
    assert late.changed == {SCALARS[0]}


def test_resend_of_an_equal_value_is_invisible_but_stamps():
    """US-05 AC5 and F6 together: an equal value re-sent by message 3 changes nothing a reader sees
    (no version, no event) but is stamped, so a late message 2 cannot overwrite it."""
    first = apply(FlightState.new("F"), [Set(SCALARS[0], "A")], message_id=1).state
    resend = apply(first, [Set(SCALARS[0], "A")], message_id=3)
    assert not resend.visible(first) and resend.state.stamp(SCALARS[0]) == 3
    late = apply(resend.state, [Set(SCALARS[0], "B")], message_id=2)
    assert late.state.get(SCALARS[0]) == "A" and late.stale == {SCALARS[0]}


def test_deletion_is_a_register_of_its_own():
    """A late deletion never removes a flight a newer message restored; a deletion of a flight not
    yet known leaves a tombstone that a late, older creating message finds deleted; a deleted
    flight's fields still move (hidden, invisible), so a restore shows the newest values."""
    created = apply_change(None, "F", [Set(SCALARS[0], "A")], message_id=5)
    assert created is not None and created.visible(FlightState.new("F"))
    restored = apply(created.state, [], message_id=9, undelete=True).state
    late_fdel = apply_change(restored, "F", [], message_id=7, create=False, delete=True)
    assert late_fdel is not None and not late_fdel.state.deleted and late_fdel.stale == {DELETED}
    tomb = apply_change(None, "G", [], message_id=4, create=False, delete=True)
    assert tomb is not None and tomb.state.deleted and not tomb.visible(FlightState.new("G"))
    older = apply_change(tomb.state, "G", [Set(SCALARS[1], "X")], message_id=3)
    assert older is not None and older.state.deleted and older.state.get(SCALARS[1]) == "X"
    assert not older.visible(tomb.state)
    assert apply_change(None, "H", [Set(SCALARS[0], "A")], message_id=1, create=False) is None


def test_whole_state_write_compacts_the_stamps():
    """A snapshot writes every key: its id becomes the base and only newer keys keep an entry."""
    newer = apply(FlightState.new("F"), [Set(SCALARS[0], "N")], message_id=9).state
    snap = apply(newer, full_state_commands({SCALARS[1]: "S"}), message_id=8, undelete=True).state
    assert dict(snap.stamps) == {BASE: 8, SCALARS[0]: 9, DELETED: 8}
    assert snap.get(SCALARS[0]) == "N" and snap.get(SCALARS[1]) == "S"
