"""Whole-state serialisation: the ``schd`` payload and the Redis projection value (FS §5.5, §6.2).

Keys sorted, collections as JSON arrays (never strings), cleared values absent, compact
separators and no ASCII escaping: equal states give equal bytes. The derived airbridges (D27) are
published inside the document: ``ABDG`` in each PSDT entry, ``STND_ABDG`` beside ``STND``.
"""

from __future__ import annotations

import json
from datetime import date
from types import MappingProxyType
from typing import cast

from msgx_engine.state.bridges import publish, unpublish
from msgx_engine.state.model import Entry, FlightState, Value, freeze_entry, kind_of

BOOKKEEPING = frozenset({"FLID", "STATE_VERSION", "FDAY"})


def plain(value: Value) -> object:
    """A value as JSON-ready Python. A snapshot serialises 10,000 whole states (issue 16), so the
    exact types a state holds (str, tuple, read-only entry views) are tested by identity and an
    entry view is copied by its own ``copy``; any other mapping or sequence takes the general way."""
    kind = type(value)
    if kind is str:
        return value
    if kind is tuple or kind is list:
        return [e.copy() if type(e) is MappingProxyType else dict(e) for e in cast(tuple[Entry, ...], value)]
    return cast(MappingProxyType, value).copy() if kind is MappingProxyType else dict(cast(Entry, value))


def state_document(state: FlightState) -> dict:
    doc: dict[str, object] = {"FLID": state.flid, "STATE_VERSION": state.state_version}
    if state.fday is not None:
        doc["FDAY"] = state.fday.isoformat()
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


def dumps(doc: object) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def state_json(state: FlightState) -> str:
    return dumps(state_document(state))


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
