"""A snapshot FLTR as its whole state (D1, omitted fields cleared): the values ``block_values`` reads, as fields.

``whole_record_fields`` is what a daily schedule stores for each record: every present, non-empty
value, keys sorted, entries frozen with their parts sorted, without the fields msgx derives
(MAFL, D30, code-share cascade). The record is read by the one rule table every message line uses
(``extract.block_values``), so a snapshot accepts and refuses exactly what a FLOP block does,
in the same words.

``frozen=False`` gives the same fields as plain dicts and tuples, which ``marshal`` can carry to
another process (the offload helper's part of a large package, ``pipeline.large_bodies.package_split``),
where ``pipeline.large_bodies.package_split.freeze`` makes them the frozen fields again.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from lxml import etree

from msgx_engine.handlers.codeshare import DERIVED
from msgx_engine.handlers.extract import block_values
from msgx_engine.state.model import Value

Fields = Mapping[str, Value]


def whole_record_fields(record: etree._Element, *, frozen: bool = True) -> Fields:
    """The whole-state fields of one FLTR; raises ``Unmapped`` naming what the catalogue refuses."""
    return whole_state(block_values(record), frozen=frozen)


def whole_state(values: Mapping[str, object], *, frozen: bool = True) -> Fields:
    """A record's values (``block_values``) as its whole state: present keys hold their value,
    everything else is absent, i.e. cleared. Equal to ``apply(any_state, full_state_commands(fields))
    .state.fields``. Derived fields are not taken from the package: ``plan_snapshot`` derives them."""
    fields: dict[str, object] = {}
    for key in sorted(values):
        value = values[key]
        if value is None or key in DERIVED:
            continue
        kind = type(value)
        if kind is list:
            entries = [dict(sorted(e.items())) for e in value]           # type: ignore[attr-defined]
            fields[key] = tuple(map(MappingProxyType, entries)) if frozen else tuple(entries)
        elif kind is dict:
            entry = dict(sorted(value.items()))                          # type: ignore[attr-defined]
            fields[key] = MappingProxyType(entry) if frozen else entry
        else:
            fields[key] = value
    return MappingProxyType(fields) if frozen else fields       # type: ignore[return-value, arg-type]
