"""Properties of the pure merge engine and the whole-state serialisation (FS §5.3, §5.5, §6.2).

Hypothesis generates states and commands over the real field catalogue (scalars, the 10
collections, exception objects, text groups), so every kind of key is exercised.
"""

from __future__ import annotations

import json
from types import MappingProxyType

from hypothesis import given, settings
from hypothesis import strategies as st

from msgx_engine.sis.fields import COLLECTION_BY_KEY, OBJECT_BY_KEY, TEXT_GROUP_BY_KEY
from msgx_engine.state.model import (
    ALL_KEYS,
    KEYED_LISTS,
    SCALAR_KEYS,
    Clear,
    FlightState,
    Replace,
    Set,
    apply,
    freeze_entry,
    full_state_commands,
    keyed_entries,
    kind_of,
)
from msgx_engine.state.serialize import dumps, state_document, state_from_json, state_json

text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=6)


def entry_for(key: str) -> st.SearchStrategy[dict]:
    spec = COLLECTION_BY_KEY.get(key) or TEXT_GROUP_BY_KEY.get(key)
    if spec is not None:
        parts = (spec.seq_attr,) * bool(spec.seq_attr) + spec.children + getattr(spec, "attrs", ())
        parts += ("TEXT",) * getattr(spec, "text", False)
    else:
        parts = OBJECT_BY_KEY[key].parts
    return st.dictionaries(st.sampled_from(parts), text, min_size=1)


def value_for(key: str):
    kind = kind_of(key)
    if kind == "scalar":
        return text
    if kind == "object":
        return entry_for(key).map(freeze_entry)
    entries = st.lists(entry_for(key).map(freeze_entry), min_size=1, max_size=3).map(tuple)
    if key in KEYED_LISTS:      # a keyed list is kept one entry per identity, in its order (L7)
        return entries.map(lambda es: keyed_entries(key, es))
    return entries


keys = st.sampled_from(sorted(ALL_KEYS))


@st.composite
def states(draw) -> FlightState:
    chosen = draw(st.lists(keys, unique=True, max_size=8))
    fields = {k: draw(value_for(k)) for k in chosen}
    return FlightState(flid=draw(text), fields=MappingProxyType(dict(sorted(fields.items()))),
                       state_version=draw(st.integers(0, 10**6)))


@st.composite
def commands(draw):
    key = draw(keys)
    kind = kind_of(key)
    if draw(st.booleans()):
        return Clear(key)
    if kind == "list":
        return Replace(key, draw(st.lists(entry_for(key), max_size=3).map(tuple)))
    value = draw(value_for(key))
    return Set(key, dict(value) if kind == "object" else value)


@settings(max_examples=200, deadline=None)
@given(states(), st.lists(commands(), max_size=6))
def test_absent_fields_never_change(state, cmds):
    """FS §5.2 / INV-14b: a key no command names keeps its value; the version advances by one."""
    result = apply(state, cmds, message_id=7)
    named = {c.key for c in cmds}
    for key in ALL_KEYS - named:
        assert result.state.fields.get(key) == state.fields.get(key)
    assert result.state.state_version == state.state_version + 1
    assert result.changed <= named and result.cleared <= result.changed


@settings(max_examples=200, deadline=None)
@given(states(), st.sampled_from(sorted(COLLECTION_BY_KEY) + sorted(TEXT_GROUP_BY_KEY)), st.data())
def test_replace_then_replace_equals_the_last_replace(state, key, data):
    """FS §5.2: a collection is replaced whole, so only the last Replace counts."""
    first = Replace(key, data.draw(st.lists(entry_for(key), max_size=3).map(tuple)))
    last = Replace(key, data.draw(st.lists(entry_for(key), max_size=3).map(tuple)))
    both = apply(state, [first, last], message_id=1).state
    only = apply(state, [last], message_id=1).state
    assert both.fields == only.fields


@settings(max_examples=200, deadline=None)
@given(states())
def test_serialisation_round_trips(state):
    """FS §5.5 / §6.2: state_from_json inverts state_json; collections stay arrays, never strings."""
    back = state_from_json(state_json(state))
    assert back.fields == state.fields and back.flid == state.flid
    assert back.state_version == state.state_version
    doc = json.loads(state_json(state))
    for key in state.fields:
        assert isinstance(doc[key], list if kind_of(key) == "list" else (dict, str))


def python_json(doc: object) -> str:
    """The serialisation FS §5.5 pins, as the standard library writes it."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@settings(max_examples=300, deadline=None)
@given(states(), st.dates(), st.lists(text, max_size=3))
def test_state_json_is_the_documents_standard_json(state, day, codes):
    """FS §5.5 / §6.2, decision P24: orjson's bytes of a whole state, airbridges published (D27),
    equal the standard library's bytes of ``state_document``: every character a field may hold
    (control characters, non-ASCII) is written the same way."""
    stands = {e.get("PSST") for e in state.entries("PSDT")} | {state.fields.get("STND")}
    bridges = {s: tuple(sorted(codes)) for s in stands if isinstance(s, str) and s}
    state = FlightState(flid=state.flid, fields=state.fields, state_version=state.state_version, fday=day,
                        bridges=bridges or None)
    assert state_json(state) == python_json(state_document(state))


json_values = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | text,
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
                           max_leaves=12)


def test_dumps_writes_str_subclass_keys_as_their_text() -> None:
    """Decision P24: a key that is a subclass of str (a column name, an enum member) is written as
    its text, as ``json.dumps`` wrote it; orjson alone refuses such keys."""
    from enum import StrEnum

    from msgx_engine.store.tables import flight_schd

    class Kind(StrEnum):
        STATE = "state"

    doc = {flight_schd.c.flid.name: "F1", Kind.STATE: [1], "A": {Kind.STATE: "x"}}
    assert dumps(doc) == python_json(doc) == '{"A":{"state":"x"},"flid":"F1","state":[1]}'


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_dumps_writes_the_standard_librarys_bytes(value):
    """Decision P24: ``dumps`` (the ``msg`` change payloads, ``GET /all/flights``) gives what
    ``json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` gave before it."""
    assert dumps(value) == python_json(value)


@settings(max_examples=200, deadline=None)
@given(states(), st.randoms(use_true_random=False))
def test_equal_states_serialise_to_equal_bytes(state, rnd):
    """FS §5.5: the same state built in another key order (fields and entry keys) gives the same bytes."""
    items = list(state.fields.items())
    rnd.shuffle(items)
    shuffled = {}
    for key, value in items:
        if isinstance(value, tuple):
            value = tuple(freeze_entry(dict(reversed(list(e.items())))) for e in value)
        shuffled[key] = value
    other = FlightState(flid=state.flid, fields=MappingProxyType(shuffled), state_version=state.state_version)
    assert state_json(other).encode() == state_json(state).encode()


@settings(max_examples=100, deadline=None)
@given(states(), states())
def test_full_state_commands_make_exactly_those_fields(before, target):
    """D1 (a snapshot FLTR): a whole-state rewrite leaves exactly the target's fields, whatever was there."""
    result = apply(before, full_state_commands(target.fields), message_id=1)
    assert result.state.fields == target.fields
    assert SCALAR_KEYS & set(result.cleared) <= set(before.fields)
