"""Reference data (the 23 SIS reference types, kind REF): parse, check and plan, purely (D17, reference categories;
D9, default ignore list; D16, request lifecycle).

A reference message is ``MSG/RECS`` plus repeated ``MSG/<TYPE>`` records. Each record is stored
as one ``ref_master`` row keyed by (TYPE, key element); the key element per type comes from the
catalogue (``sis-catalogue.md`` §5). The record's content is kept whole as a JSON object with
sorted keys so equal records store equal text:

- a plain element -> its text; an empty element is absent ("no current value", INV-26: a field
  is not a deletion, and the row stays);
- a repeated element (STND, GATE, REGC, OCAT, OGRP, ...) -> a JSON array in input order: plain
  text entries as strings, entries with attributes or sub-elements (TRML@MVIN/@FLIN, ABBR@CODE,
  SUBC {CODE, NAME, NAMC}) as objects whose text sits under ``TEXT``; empty entries are dropped
  (the peer drops them too) and an array left empty is absent.

Strict like every handler: a record without its key, an element or attribute the catalogue does
not know for that type, or a key repeated within one DNLD/RESP makes the message DEAD(malformed)
naming it, and nothing is written (INV-27: the category keeps its old rows, other categories are
not touched).

RECS guards the one write that deletes: a full package (DNLD/RESP) replaces its category, so one
that carries fewer records than its RECS announces (a truncated package, or an empty one with
RECS > 0), or that has no readable RECS, is DEAD(records_mismatch) and changes nothing (INV-27,
US-14 AC3; decision L4, reference RECS check). Clearing a category stays possible: RECS 0 and no records. More records
than RECS loses nothing and occurs in the AODB's own samples (AIRC/01 says 1 with 2 records), so
it is taken and logged; incremental messages (ADD/UPD/DEL) delete nothing beyond their keys, so
their RECS is only logged (FLTL/02 says 2 with 1).

This module imports no I/O code: the route (``pipeline.routing``) picks the RQRD a RESP answers
(``answers.select_request``), and the store (``store.reference.write_reference``) writes the plan.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache

from lxml import etree

from msgx_engine.handlers.answers import (
    LATE_ANSWER,
    NO_REQUEST,
    AnswerRefusal,
    OpenRequest,
    RequestCompletion,
    answered_too_early,
)
from msgx_engine.handlers.decision import Decision, Plan
from msgx_engine.handlers.extract import Unmapped, entry_of, text_of
from msgx_engine.sis.catalogue import reference_entry
from msgx_engine.sis.decode import Meta, SisMessage
from msgx_engine.state.bridges import ABDG

REPLACE_STYPS = ("DNLD", "RESP")      # the whole category is replaced (D17, reference categories)
UPSERT_STYPS = ("ADD", "UPD")
DELETE_STYPS = ("DEL",)


class RecordsMismatch(ValueError):
    """A full package whose RECS promises records it does not carry (DEAD(records_mismatch))."""


@dataclass(frozen=True)
class RecordShape:
    """What the catalogue allows inside one record of a reference type."""

    rtype: str
    key: str
    elements: frozenset[str]
    repeated: frozenset[str]
    attrs: Mapping[str, tuple[str, ...]]       # element -> allowed attributes
    children: Mapping[str, tuple[str, ...]]    # element -> allowed sub-elements


@cache
def record_shape(rtype: str) -> RecordShape | None:
    """The record shape of ``rtype`` from the catalogue, or None for a type it does not list
    (built once per type: the catalogue is read-only)."""
    entry = reference_entry(rtype)
    if entry is None:
        return None
    attrs: dict[str, list[str]] = {}
    for spec in entry.get("attributes", ()):
        element, _, attr = spec.partition("@")
        attrs.setdefault(element, []).append(attr)
    children = {name: tuple(f["elements"]) for name, f in entry["fields"].items() if f.get("elements")}
    return RecordShape(rtype, entry["key"], frozenset(entry["elements"]), frozenset(entry["repeated"]),
                       {k: tuple(v) for k, v in attrs.items()}, children)


@dataclass(frozen=True)
class ReferenceContext:
    """What the route loads for a reference message: the RQRD a RESP answers (D16, request lifecycle,
    ``answers.select_request``), or why it answers none when that is known (late, stray echo)."""

    request: OpenRequest | None = None
    refusal: AnswerRefusal | None = None


@dataclass(frozen=True)
class RefPlan(Plan):
    """What one accepted reference message writes (the store writer's whole input).

    ``records`` are (key, fields JSON) in input order for DNLD/RESP/ADD/UPD (for ADD/UPD a key
    given twice keeps its last record: the records apply one after the other); ``keys`` are the
    keys a DEL removes. ``recs_note`` says how RECS disagreed with the records, for the log.
    """

    rtype: str
    styp: str
    source: str
    records: tuple[tuple[str, str], ...] = ()
    keys: tuple[str, ...] = ()
    recs_note: str | None = None

    @property
    def replaces(self) -> bool:
        return self.styp in REPLACE_STYPS


@dataclass(frozen=True)
class BridgeRefresh(Plan):
    """An ABDG message's plan: write its ``RefPlan``, then re-derive the airbridges of every live
    flight the new mapping changes (D27, stand to airbridge), with this message's META on their events. One plan, so
    its writer sees the mapping before and after the write and looks only at the flights on the
    stands whose airbridges changed, not at every flight ever stored."""

    ref: RefPlan
    meta: Meta


def _entry_value(el: etree._Element, shape: RecordShape) -> str | dict[str, str] | None:
    """One element's value: text, an object (attributes/sub-elements), or None when empty."""
    attrs = shape.attrs.get(el.tag, ())
    children = shape.children.get(el.tag, ())
    entry = entry_of(el, seq_attr=None, children=children, attrs=attrs, text=True)
    if not entry:
        return None
    if not attrs and not children:
        return entry["TEXT"]
    return entry


def record_fields(record: etree._Element, shape: RecordShape, where: str) -> dict[str, object]:
    """A record's values (see the module docstring); raises Unmapped naming what does not fit."""
    grouped: dict[str, list[etree._Element]] = {}
    for child in record:
        if not isinstance(child.tag, str):
            continue
        if child.tag not in shape.elements:
            raise Unmapped(f"{where}: {shape.rtype}/{child.tag} is not in the catalogue")
        grouped.setdefault(child.tag, []).append(child)
    fields: dict[str, object] = {}
    for tag, elements in grouped.items():
        try:
            values = [_entry_value(e, shape) for e in elements]
        except Unmapped as exc:
            raise Unmapped(f"{where}: {exc}") from None
        present = [v for v in values if v is not None]
        if tag in shape.repeated:
            if present:
                fields[tag] = present
        elif len(elements) > 1:
            raise Unmapped(f"{where}: {tag} appears {len(elements)} times; it is a single value")
        elif present:
            fields[tag] = present[0]
    return fields


def fields_json(fields: Mapping[str, object]) -> str:
    """The stored text: sorted keys, no ASCII escaping, so equal records store equal text."""
    return json.dumps(fields, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def read_records(msg: SisMessage, shape: RecordShape) -> tuple[list[tuple[str, str]], str | None]:
    """(key, fields JSON) of every record in input order, and the RECS note; raises Unmapped."""
    for child in msg.root:
        if isinstance(child.tag, str) and child.tag not in ("META", "RECS", "SEQN", shape.rtype):   # SEQN: an echo
            raise Unmapped(f"MSG/{child.tag} is not part of a {shape.rtype} message")
    records: list[tuple[str, str]] = []
    for index, record in enumerate(msg.root.findall(shape.rtype), start=1):
        where = f"{shape.rtype} record #{index}"
        if any(v.strip() for k, v in record.attrib.items() if not k.startswith("{")):
            raise Unmapped(f"{where} carries attributes")
        fields = record_fields(record, shape, where)
        key = fields.get(shape.key)
        if not isinstance(key, str):
            raise Unmapped(f"{where} has no key element {shape.key}")
        records.append((key, fields_json(fields)))
    return records, _recs_note(msg, len(records))


def _recs_note(msg: SisMessage, count: int) -> str | None:
    recs = msg.root.findall("RECS")
    text = text_of(recs[0]) if recs else ""
    if len(recs) == 1 and text.isdigit() and int(text) == count:
        return None
    shown = "missing" if not recs else repr(text)
    return f"RECS is {shown} but {count} {msg.meta.type} record(s) are present (logged, not refused)"


def check_full_package(msg: SisMessage, count: int) -> None:
    """A full package must carry at least the records its RECS announces (see the module doc);
    raises RecordsMismatch. RECS 0 with no records is an intended clear."""
    recs = msg.root.findall("RECS")
    text = text_of(recs[0]) if len(recs) == 1 else ""
    if not text.isdigit():
        shown = "missing" if not recs else f"{[text_of(r) for r in recs]!r}"
        raise RecordsMismatch(f"{msg.meta.type} {msg.meta.styp} replaces the whole category but its RECS is "
                              f"{shown}: it cannot show that it is complete; nothing changed")
    if int(text) > count:
        raise RecordsMismatch(f"{msg.meta.type} {msg.meta.styp} announces RECS {int(text)} but carries {count} "
                              f"record(s): a truncated package would delete the missing records; nothing changed")


def _check_unique(records: list[tuple[str, str]], rtype: str, key: str) -> None:
    seen: set[str] = set()
    for rkey, _ in records:
        if rkey in seen:
            raise Unmapped(f"{rtype} {key}={rkey!r} appears more than once in one full package")
        seen.add(rkey)


def plan(msg: SisMessage) -> RefPlan:
    """The write plan of a reference message; raises Unmapped (DEAD malformed), RecordsMismatch
    (DEAD records_mismatch) or LookupError (no such type or subtype: SKIPPED unsupported)."""
    shape = record_shape(msg.meta.type)
    styp = msg.meta.styp
    if shape is None or styp not in REPLACE_STYPS + UPSERT_STYPS + DELETE_STYPS:
        raise LookupError(f"{msg.meta.type}/{styp} is not a reference operation")
    records, note = read_records(msg, shape)
    base = RefPlan(shape.rtype, styp, msg.meta.sndr, recs_note=note)
    if styp in DELETE_STYPS:
        return replace(base, keys=tuple(dict.fromkeys(k for k, _ in records)))
    if styp in REPLACE_STYPS:
        _check_unique(records, shape.rtype, shape.key)
        check_full_package(msg, len(records))
        return replace(base, records=tuple(records))
    return replace(base, records=tuple(dict(records).items()))


def unanswerable(msg: SisMessage, request: OpenRequest | None) -> str | None:
    """Why a reference RESP cannot be taken (D16, US-08 AC4/AC5), or None when it answers ``request``.

    Stricter than the snapshot RESP on purpose: the RQRD must have a send time and the answer's
    DTTM must be readable, since an answer not proven to follow the request must not replace a
    whole category.
    """
    if request is None:
        return f"no open (SENT) RQRD request for {msg.meta.type} was in flight when the answer came"
    return answered_too_early(msg, request, strict=True)


def decide(msg: SisMessage, ctx: ReferenceContext) -> Decision:
    """DNLD/RESP replace the category, ADD/UPD upsert, DEL deletes by key (D17); a RESP also
    completes the request it answers.

    The records are checked before the request: a malformed RESP is DEAD whether or not it was
    asked for, so the operator sees it.
    """
    try:
        ref_plan = plan(msg)
    except LookupError as exc:
        return Decision.skip("unsupported", str(exc))
    except Unmapped as exc:
        return Decision.dead("malformed", str(exc))
    except RecordsMismatch as exc:
        return Decision.dead("records_mismatch", str(exc))
    plans: tuple[Plan, ...] = (BridgeRefresh(ref_plan, msg.meta),) if ref_plan.rtype == ABDG else (ref_plan,)
    if msg.meta.styp != "RESP":
        return Decision.apply(plans=plans)
    if ctx.refusal is not None:
        alert = (f"late {msg.meta.type} RESP {msg.meta.identity} not applied: {ctx.refusal.detail}"
                 if ctx.refusal.reason == LATE_ANSWER else None)
        return Decision.skip(ctx.refusal.reason, ctx.refusal.detail, alert=alert)
    skip = unanswerable(msg, ctx.request)
    if skip:
        return Decision.skip(NO_REQUEST, skip)
    assert ctx.request is not None
    return Decision.apply(plans=(*plans, RequestCompletion(ctx.request.req_id)))
