"""Stand -> airbridge (US-14, US-05 AC6, D27, stand to airbridge): which airbridges serve the stands a flight names.

The AODB sends the mapping as reference data: every ``ABDG`` record (key ``ABCD``, the airbridge
code) lists the stands it serves in repeated ``STND`` elements. msgx never asks anyone else
(C-31). A flight names stands in its PSDT entries (``PSST``) and in its flight-level ``STND``.

The airbridges are a *derived* part of the state, not a message field: no message can set them
(the catalogue has no ABDG inside PSDT, so such a message is DEAD), and they are computed when a
state is written (``derive``) and stored with it (``flight_schd.stand_bridges``), so the value a
consumer sees always belongs to the ``state_version`` it came with. A flight keeps
``FlightState.bridges``: each of its stands -> the sorted codes of the airbridges serving it
(``()`` for a remote stand), or None while nothing is derived: no stand, or the ABDG category has
never been loaded (unknown, published as ``null``, never as ``[]``: US-14 AC3).

Published (``serialize.state_document``): each PSDT entry carries ``"ABDG"`` and a flight with a
``STND`` carries ``"STND_ABDG"``. A PSDT entry without a PSST names no stand: ``[]``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType

import orjson

from msgx_engine.state.model import FlightState

ABDG = "ABDG"                  # the reference type, and the key each PSDT entry carries
STND_ABDG = "STND_ABDG"        # the flight-level stand's airbridges in the whole state
PSDT, PSST, STND = "PSDT", "PSST", "STND"
STAND_KEYS = frozenset({PSDT, STND})       # the message fields the derived keys follow

BridgeMap = Mapping[str, tuple[str, ...]]       # stand -> sorted codes of the airbridges serving it


def bridge_map(records: Iterable[tuple[str, Mapping[str, object]]]) -> dict[str, tuple[str, ...]]:
    """The mapping from ABDG records (airbridge code, record fields): stand -> sorted codes."""
    served: dict[str, set[str]] = {}
    for code, fields in records:
        stands = fields.get(STND) or ()
        for stand in stands if isinstance(stands, list) else (stands,):
            if isinstance(stand, str) and stand:
                served.setdefault(stand, set()).add(code)
    return {stand: tuple(sorted(codes)) for stand, codes in sorted(served.items())}


def stands_of(state: FlightState) -> tuple[str, ...]:
    """Every stand the flight names (PSDT PSST values and STND), sorted, each once."""
    stands = {e[PSST] for e in state.fields.get(PSDT) or ()
              if (type(e) is MappingProxyType or isinstance(e, Mapping)) and e.get(PSST)}
    stnd = state.fields.get(STND)
    if isinstance(stnd, str) and stnd:
        stands.add(stnd)
    return tuple(sorted(stands))


def bridges_for(stands: Iterable[str], mapping: BridgeMap | None) -> dict[str, tuple[str, ...]] | None:
    """The derived value for these stands: None when there is none or the mapping is unknown."""
    wanted = sorted(set(stands))
    if mapping is None or not wanted:
        return None
    return {stand: mapping.get(stand, ()) for stand in wanted}


def changed_stands(before: BridgeMap | None, after: BridgeMap | None) -> frozenset[str] | None:
    """The stands whose airbridges differ between two mappings; None when either is unknown (the
    category never loaded), which changes every stand: a flight written meanwhile stored ABDG null.
    A flight on any other stand already holds what ``after`` gives it (every write derives its
    airbridges from the mapping of the moment), so only these stands' flights can be stale."""
    if before is None or after is None:
        return None
    return frozenset(stand for stand in before.keys() | after.keys() if before.get(stand) != after.get(stand))


def derive(state: FlightState, mapping: BridgeMap | None) -> FlightState:
    """``state`` with its airbridges derived from ``mapping`` (None: the category was never loaded);
    the same object when they are already those (no copy per flight of a 10,000-flight snapshot)."""
    return _derived(state, stands_of(state), mapping)


def _derived(state: FlightState, stands: tuple[str, ...], mapping: BridgeMap | None) -> FlightState:
    bridges = bridges_for(stands, mapping)
    return state if bridges == state.bridges else replace(state, bridges=bridges)


def needs_derivation(before: FlightState | None, after: FlightState) -> bool:
    """A written state needs new airbridges when its stands changed, or it is new or restored
    (a deleted flight is not re-derived when the mapping changes). Otherwise the stored value is
    current: every mapping change re-derives the live flights it affects."""
    if before is None or (before.deleted and not after.deleted):
        return bool(stands_of(after)) or after.bridges is not None
    return stands_of(before) != stands_of(after)


def airbridges(state: FlightState, stand: str | None) -> list[str] | None:
    """What the whole state publishes for one stand: the codes, [] for none, None when unknown."""
    if not stand:
        return []
    if state.bridges is None:
        return None
    return list(state.bridges.get(stand, ()))


def publish(state: FlightState, doc: dict[str, object]) -> None:
    """Add the derived airbridges to a whole-state document built from ``state.fields``."""
    entries = doc.get(PSDT)
    if isinstance(entries, list):
        for entry in entries:
            entry[ABDG] = airbridges(state, entry.get(PSST))
    stnd = state.fields.get(STND)
    if isinstance(stnd, str):
        doc[STND_ABDG] = airbridges(state, stnd)


def unpublish(doc: dict[str, object]) -> dict[str, tuple[str, ...]] | None:
    """Inverse of ``publish``: take the derived keys out of ``doc`` and return ``bridges`` (None
    when a stand's value is null or absent)."""
    found: dict[str, object] = {}
    stnd, stnd_codes = doc.get(STND), doc.pop(STND_ABDG, None)
    if isinstance(stnd, str):
        found[stnd] = stnd_codes
    entries = doc.get(PSDT)
    for entry in entries if isinstance(entries, list) else ():
        codes = entry.pop(ABDG, None)
        if entry.get(PSST):
            found[entry[PSST]] = codes
    if not found or any(codes is None for codes in found.values()):
        return None
    return {stand: tuple(codes) for stand, codes in sorted(found.items()) if isinstance(codes, list)}


def to_column(bridges: Mapping[str, tuple[str, ...]] | None) -> str | None:
    """The stored form (``flight_schd.stand_bridges``): JSON object, keys sorted, compact, not
    ASCII-escaped; NULL for None. Written by orjson (the writer of P24, orjson and new-day rows: the same
    text the standard library gave, at a tenth of the cost, for a snapshot's 10,000 main rows)."""
    if bridges is None:
        return None
    return orjson.dumps(dict(bridges), option=orjson.OPT_SORT_KEYS).decode()


def from_column(raw: object) -> dict[str, tuple[str, ...]] | None:
    if raw is None:
        return None
    value = json.loads(raw) if isinstance(raw, str) else raw
    return {stand: tuple(codes) for stand, codes in sorted(value.items())}  # type: ignore[union-attr]


def with_bridges(states: Iterable[FlightState], mapping: Callable[[], BridgeMap | None]) -> tuple[FlightState, ...]:
    """Every state derived; ``mapping()`` is called only if one of them names a stand. Each
    state's stands are read once (a snapshot derives 10,000 states)."""
    derived = []
    for state in states:
        stands = stands_of(state)
        derived.append(_derived(state, stands, mapping() if stands else None))
    return tuple(derived)
