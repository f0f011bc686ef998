"""Whole-state serialisation: the ``schd`` payload and the Redis projection value (FS §5.5, §6.2).

Keys sorted, collections as JSON arrays (never strings), cleared values absent, compact
separators and no ASCII escaping: equal states give equal bytes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import date
from types import MappingProxyType

from msgx_engine.state.model import FlightState, Value, freeze_entry, kind_of


def plain(value: Value) -> object:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return dict(value)
    return [dict(e) for e in value]


def state_document(state: FlightState) -> dict:
    doc: dict[str, object] = {"FLID": state.flid, "STATE_VERSION": state.state_version}
    if state.fday is not None:
        doc["FDAY"] = state.fday.isoformat()
    for key, value in state.fields.items():
        doc[key] = plain(value)
    return doc


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
                       fday=date.fromisoformat(fday) if fday else None, state_version=version)
