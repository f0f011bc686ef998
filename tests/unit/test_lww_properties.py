"""Last writer wins by mailbox id (docs/decisions.md F6, L7, FS §5.3): a row that commits late with
a smaller id never rewinds newer state, and any arrival order of a flight's messages converges to
the state of the in-order run.

Hypothesis draws a flight's messages over the real catalogue (FLOP-like increments that create the
flight, PORT entries by POID, FDEL deletions, ADFT-like restores, whole-state snapshots) and applies
them through the pure transition ``apply_change`` in id order and in a random permutation (late
arrivals), deciding each write's visibility and version the way the pipeline does
(``pipeline.transitions.next_states``: a write a reader does not see keeps the version).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType

from hypothesis import given, settings
from hypothesis import strategies as st

from msgx_engine.handlers.codeshare import shared_commands
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
    SetEntry,
    Value,
    apply,
    apply_change,
    entry_stamp_key,
    freeze_entry,
    full_state_commands,
)

SCALARS = sorted(SCALAR_KEYS)[:3]
LIST_KEY = "GTDT"
OBJECT_KEY = sorted(OBJECT_KEYS)[0]
PORT = "PORT"
KEYS = [*SCALARS, LIST_KEY, OBJECT_KEY, PORT]
PORT_STAMPS = [entry_stamp_key(PORT, p) for p in ("O", "C")]
STAMP_KEYS = [*KEYS, *PORT_STAMPS, DELETED]
values = st.sampled_from(["A", "B", "C"])


@dataclass(frozen=True)
class Msg:
    """One message's change to the flight (what a handler's FlightChange carries)."""

    kind: str                       # flop | fdel | adft | snapshot
    commands: tuple[Command, ...]

    @property
    def create(self) -> bool:
        return self.kind != "fdel"


def _port_entry(poid: str, potm: str):
    return freeze_entry({"POID": poid, "POTM": potm})


def command(key: str, kind: str) -> st.SearchStrategy[Command]:
    if key == LIST_KEY:
        gates = st.lists(values, max_size=2).map(
            lambda gs: tuple(freeze_entry({"GTNO": str(i + 1), "GATE": g}) for i, g in enumerate(gs)))
        return gates.map(lambda e: Replace(key, e))
    if key == PORT and kind == "flop":      # a PORT message: one POID set or cleared, or both cleared
        poid = st.sampled_from(["O", "C"])
        one = st.builds(lambda p, v: SetEntry(key, p, None if v is None else _port_entry(p, v)),
                        poid, st.none() | values)
        return st.one_of(one, one, st.just(Clear(key)))
    if key == PORT:                          # an ADFT record carries the whole list
        entries = st.lists(st.sampled_from(["O", "C"]), unique=True, max_size=2).flatmap(
            lambda ps: st.tuples(*(values.map(lambda v, p=p: _port_entry(p, v)) for p in ps)))
        return entries.map(lambda e: Replace(key, tuple(e)))
    if key == OBJECT_KEY:
        return st.one_of(st.just(Clear(key)), values.map(lambda v: Set(key, freeze_entry({"_": v}))))
    return st.one_of(st.just(Clear(key)), values.map(lambda v: Set(key, v)))


@st.composite
def message(draw) -> Msg:
    kind = draw(st.sampled_from(["flop", "flop", "flop", "fdel", "adft", "snapshot"]))
    if kind == "fdel":
        return Msg(kind, ())
    keys = draw(st.lists(st.sampled_from(KEYS), unique=True, min_size=1, max_size=4))
    cmds = [draw(command(k, kind)) for k in keys]
    if kind == "snapshot":      # a whole state (D1): every other key cleared
        fields = apply(FlightState.new("F"), cmds, message_id=None).state.fields
        return Msg(kind, tuple(full_state_commands(fields)))
    return Msg(kind, tuple(cmds))


@dataclass
class Run:
    """One arrival order's outcome: the stored state and what readers were sent (the version and
    the state of every visible write, in order)."""

    state: FlightState | None = None
    published: list[tuple[int, bool, dict[str, Value]]] = field(default_factory=list)


def _run(order: list[int], msgs: list[Msg]) -> FlightState | None:
    return _pipeline(order, msgs).state


def _pipeline(order: list[int], msgs: list[Msg]) -> Run:
    run = Run()
    for i in order:
        m = msgs[i]
        result = apply_change(run.state, "F", m.commands, message_id=i + 1, create=m.create,
                              delete=m.kind == "fdel", undelete=m.kind in ("adft", "snapshot"))
        if result is None:
            continue
        base = run.state or FlightState.new("F")
        if result.visible(base):
            run.published.append((result.state.state_version, result.state.deleted, dict(result.state.fields)))
            run.state = result.state
        else:       # a silent write: stamps and hidden fields only, the version stays
            run.state = replace(result.state, state_version=base.state_version)
    return run


def _shown(run: Run) -> dict[str, Value] | None:
    """What a reader holds of the flight at the end: the fields of a live flight it was sent, or
    None (never sent, or deleted). A live flight with no field at all is nothing to show either."""
    s = run.state
    if s is None or s.deleted or not s.fields:
        return None
    return dict(s.fields)


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
    assert {k: late.stamp(k) for k in STAMP_KEYS} == {k: in_order.stamp(k) for k in STAMP_KEYS}


@settings(max_examples=200, deadline=None)
@given(msgs=st.lists(message(), min_size=1, max_size=7), data=st.data())
def test_versions_and_visibility_in_any_arrival_order(msgs: list[Msg], data) -> None:
    """F6, INV-13, INV-29, decision L7: ``state_version`` counts the writes a reader saw, so it is
    not the same number in every order (a late message that finds every key newer is silent, and
    the in-order run saw it). What holds in every order: each visible write is announced with the
    next version (1, 2, 3, ... without a gap, never more than the messages), the last thing a reader
    was sent is the final state (visible fields and deletion flag), and what a reader holds at the
    end - the live flight's fields, or nothing for a deleted or never-announced one - is the same
    as in id order."""
    order = data.draw(st.permutations(range(len(msgs))))
    in_order, late = _pipeline(list(range(len(msgs))), msgs), _pipeline(list(order), msgs)
    for run in (in_order, late):
        versions = [v for v, _, _ in run.published]
        assert versions == list(range(1, len(versions) + 1)) and len(versions) <= len(msgs)
        final = run.state
        assert final is not None or not versions
        if final is not None:
            assert final.state_version == len(versions)
        if final is not None and not final.deleted and final.fields:
            assert versions, "a live flight with fields was never announced"
            assert run.published[-1][1:] == (False, dict(final.fields))
        if versions and run.published[-1][1]:
            assert final is not None and final.deleted
    assert _shown(late) == _shown(in_order)


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
    assert {k: late.stamp(k) for k in (*KEYS, *PORT_STAMPS)} == {k: in_order.stamp(k) for k in (*KEYS, *PORT_STAMPS)}


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


def test_port_entries_are_registers_of_their_own():
    """Decision L7: each POID of PORT is stamped alone, so an older open time (id 11) that arrives
    after a newer close time (id 12) lands; a whole-list write (an ADFT record, id 13) stamps the
    list and supersedes both, and a later POID write (id 14) stamps only its POID."""
    close = apply(FlightState.new("F"), [SetEntry(PORT, "C", _port_entry("C", "B"))], message_id=12).state
    late_open = apply(close, [SetEntry(PORT, "O", _port_entry("O", "A"))], message_id=11)
    assert late_open.state.entries(PORT) == (_port_entry("O", "A"), _port_entry("C", "B"))
    assert not late_open.stale and late_open.changed == {PORT}
    older_close = apply(late_open.state, [SetEntry(PORT, "C", None)], message_id=10)
    assert older_close.stale == {"PORT/C"} and older_close.state.entries(PORT) == late_open.state.entries(PORT)
    whole = apply(late_open.state, [Replace(PORT, (_port_entry("C", "W"),))], message_id=13).state
    assert whole.entries(PORT) == (_port_entry("C", "W"),)
    assert dict(whole.stamps) == {PORT: 13} and whole.stamp("PORT/O") == whole.stamp("PORT/C") == 13
    reopened = apply(whole, [SetEntry(PORT, "O", _port_entry("O", "R"))], message_id=14).state
    assert reopened.stamp("PORT/O") == 14 and reopened.stamp("PORT/C") == 13
    legacy = FlightState("F", stamps=MappingProxyType({PORT: 20}))     # stamped whole before L7
    assert apply(legacy, [SetEntry(PORT, "O", _port_entry("O", "A"))], message_id=19).stale == {"PORT/O"}


def test_a_code_share_childs_late_port_entry_reaches_its_master():
    """Decisions C4 and L7: the child passes its PORT change on entry by entry, so its late open
    time (id 11) lands on the master although the master's PORT was written by id 12."""
    child_before = FlightState("C", fields=MappingProxyType({PORT: (_port_entry("C", "B"),)}))
    child_after = FlightState("C", fields=MappingProxyType({PORT: (_port_entry("O", "A"), _port_entry("C", "B"))}))
    commands = shared_commands(child_before, child_after)
    assert commands == (SetEntry(PORT, "O", _port_entry("O", "A")),)
    master = apply(FlightState.new("M"), [SetEntry(PORT, "C", _port_entry("C", "B"))], message_id=12).state
    assert apply(master, commands, message_id=11).state.entries(PORT) == child_after.entries(PORT)
