"""Whole-state serialisation: the ``schd`` payload and the Redis projection value (FS §5.5, §6.2).

Keys sorted, collections as JSON arrays (never strings), cleared values absent, compact
separators and no ASCII escaping: equal states give equal bytes. The derived airbridges (D27, stand to airbridge) are
published inside the document: ``ABDG`` in each PSDT entry, ``STND_ABDG`` beside ``STND``.

The bytes are written by orjson (decision P24, orjson and new-day rows): the same bytes ``json.dumps(sort_keys=True,
separators=(",", ":"), ensure_ascii=False)`` gives for these documents (``tests/unit/
test_state_properties.py`` holds the two equal), at a sixth of the cost; a snapshot serialises
10,000 whole states and every dynamic message two documents.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import date
from types import MappingProxyType
from typing import cast

import orjson

from msgx_engine.state.bridges import publish, unpublish
from msgx_engine.state.model import Entry, FlightState, Value, freeze_entry, kind_of

BOOKKEEPING = frozenset({"FLID", "STATE_VERSION", "FDAY"})


def plain(value: Value) -> object:
    """A value as JSON-ready Python. A snapshot serialises 10,000 whole states, so the
    exact types a state holds (str, tuple, read-only entry views) are tested by identity and an
    entry view is copied by its own ``copy``; any other mapping or sequence takes the general way."""
    kind = type(value)
    if kind is str:
        return value
    if kind is tuple or kind is list:
        return [_entry_dict(e) for e in cast("tuple[Entry, ...]", value)]
    return _entry_dict(cast(Entry, value))


def _entry_dict(entry: Entry) -> dict:
    """An entry as a plain dict: a read-only view (what a state holds) by its own ``copy``."""
    return entry.copy() if type(entry) is MappingProxyType else dict(entry)


def _bookkeeping(state: FlightState) -> dict[str, object]:
    doc: dict[str, object] = {"FLID": state.flid, "STATE_VERSION": state.state_version}
    if state.fday is not None:
        doc["FDAY"] = state.fday.isoformat()
    return doc


def state_document(state: FlightState) -> dict:
    doc = _bookkeeping(state)
    for key, value in state.fields.items():
        doc[key] = value if type(value) is str else plain(value)
    publish(state, doc)
    return doc


def document_changes(before: FlightState, after: FlightState) -> tuple[frozenset[str], frozenset[str]]:
    """The published keys whose value differs between two states (derived keys included), and the
    subset ``after`` no longer has: what a ``msg`` change event lists when only derived content
    moved."""
    old, new = state_document(before), state_document(after)
    keys = (old.keys() | new.keys()) - BOOKKEEPING
    changed = frozenset(k for k in keys if (k in old) != (k in new) or old.get(k) != new.get(k))
    return changed, frozenset(k for k in changed if k not in new)


# keys sorted; a key that is a str subclass (an enum member, a column name) written as its text, as
# the standard library did (orjson refuses it without the option)
_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def _entry(value: object) -> dict:
    """orjson's fallback for what it does not write itself: an entry view as the dict it shows
    (the read-only view, which a whole state holds by the hundred thousand, tested first and by
    identity: an ``isinstance`` against the abstract ``Mapping`` costs more than the copy)."""
    if type(value) is MappingProxyType or isinstance(value, Mapping):
        return _entry_dict(cast(Entry, value))
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def dumps(doc: object) -> str:
    return orjson.dumps(doc, default=_entry, option=_OPTIONS).decode()


def state_json(state: FlightState) -> str:
    """``dumps(state_document(state))``. A group's entries are copied into a list of dicts by one
    comprehension each (``publish`` extends the PSDT copies with their airbridges), which orjson
    writes in C; handed the read-only views, it called ``_entry`` back for each of a snapshot's
    90,000: 76 against 59 ms for 10,000 states (run 34). A single object's view
    still goes by ``_entry``: a state holds few."""
    doc = _bookkeeping(state)
    for key, value in state.fields.items():
        if type(value) is tuple:
            doc[key] = [e.copy() for e in cast("tuple[MappingProxyType[str, str], ...]", value)]
        else:
            doc[key] = value
    publish(state, doc)
    return dumps(doc)


def tombstone_json(flid: str, state_version: int) -> str:
    return dumps({"DELETED": True, "FLID": flid, "STATE_VERSION": state_version})


def state_from_json(text: str) -> FlightState:
    """Inverse of ``state_json`` (round-trip property; projection drift checks)."""
    doc = json.loads(text)
    flid = doc.pop("FLID")
    version = doc.pop("STATE_VERSION")
    fday = doc.pop("FDAY", None)
    bridges = unpublish(doc)
    fields: dict[str, Value] = {}
    for key, value in doc.items():
        kind = kind_of(key)
        if kind == "list":
            fields[key] = tuple(freeze_entry(e) for e in value)
        elif kind == "object":
            fields[key] = freeze_entry(value)
        else:
            fields[key] = value
    return FlightState(flid=flid, fields=MappingProxyType(dict(sorted(fields.items()))),
                       fday=date.fromisoformat(fday) if fday else None, state_version=version,
                       bridges=bridges)
