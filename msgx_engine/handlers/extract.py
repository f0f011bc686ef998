"""Turn SIS elements into state values, strictly: nothing in a message is dropped silently.

An element or attribute that the catalogue does not know raises ``Unmapped`` (the message goes
DEAD(malformed) naming it), unless it is only whitespace.

One rule table (``RULES``, built from the catalogue in ``sis.fields``) and one reading of each
element serve every message line: a FLOP block, an ADFT record and a snapshot FLTR are read by
``block_values``, and a snapshot's whole states (``handlers.whole_record``) are made from what it
returns. A 10,000-flight package reads it 10,000 times, so the common case costs one lookup per
name; the wording of a refusal is built only when there is one.
"""

from __future__ import annotations

from dataclasses import dataclass

from lxml import etree

from msgx_engine.sis.fields import (
    COLLECTION_BY_KEY,
    OBJECT_BY_KEY,
    SCALARS,
    SEQUENCE_MAX,
    TEXT_GROUP_BY_KEY,
    CollectionSpec,
    ObjectSpec,
    TextGroupSpec,
)


class Unmapped(ValueError):
    """The message carries something the catalogue has no place for, or breaks a structural rule."""


def text_of(el: etree._Element | None) -> str:
    return (el.text or "").strip() if el is not None else ""


def _children(el: etree._Element) -> list[etree._Element]:
    return [c for c in el if isinstance(c.tag, str)]


def is_empty(el: etree._Element) -> bool:
    """No text, no child elements and no non-empty attribute: a clear marker (D7, empty elements clear)."""
    return not text_of(el) and not _children(el) and not any(v.strip() for v in el.attrib.values())


# The names an element may use, each mapped to the catalogue's own string: a key of the values is
# that one object, not the copy lxml makes of each name it reads. One lookup both tests a name
# and gives it; the offload helper's part then repeats one object per name, which ``marshal``
# writes once and refers back to.
Names = dict[str, str]


def _names(*names: str | None) -> Names:
    return {name: name for name in names if name}


@dataclass(frozen=True)
class Rule:
    """What the catalogue allows under one element name of a flight block (FS §6)."""

    key: str                    # the catalogue's string for the element's name
    kind: str                   # "group" (a collection or text group), "object" or "scalar"
    seq: str | None = None      # a group's sequence attribute
    attrs: Names | None = None  # attributes allowed on an entry or object (the sequence one included)
    children: Names | None = None
    text: bool = False          # the element's own text is a value (TEXT)
    cap: int = 0                # a group's entries in one message (D25, sequence attributes and sizes)
    enums: tuple[tuple[str, tuple[str, ...]], ...] = ()   # an object's attribute -> allowed values


def _rules() -> dict[str, Rule]:
    rules = {s: Rule(s, "scalar") for s in SCALARS}
    groups: tuple[CollectionSpec | TextGroupSpec, ...] = (*COLLECTION_BY_KEY.values(), *TEXT_GROUP_BY_KEY.values())
    for spec in groups:
        rules[spec.key] = Rule(spec.key, "group", spec.seq_attr, _names(spec.seq_attr, *getattr(spec, "attrs", ())),
                               _names(*spec.children), bool(getattr(spec, "text", False)), spec.max_entries)
    for obj in OBJECT_BY_KEY.values():
        rules[obj.key] = Rule(obj.key, "object", None, _names(*obj.attrs), _names(*obj.children), obj.text,
                              enums=obj.enums)
    return rules


RULES: dict[str, Rule] = _rules()


def _entry(el: etree._Element, seq: str | None, attrs: Names, children: Names,
           text: bool) -> tuple[dict[str, str], bool]:
    """An element's parts (attributes, child elements, its own text as TEXT), without the empty
    ones except the sequence attribute, and whether the element is empty (``is_empty``)."""
    entry: dict[str, str] = {}
    empty = True
    blank = False            # a part with no value: only then do parts need filtering
    for attr, value in el.items():
        name = attrs.get(attr)
        if name is None:
            if attr[:1] != "{":
                raise Unmapped(f"{el.tag}@{attr} is not in the catalogue")
            if value.strip():    # a namespaced attribute is no part, but it is content
                empty = False
            continue
        value = value.strip()
        if value:
            empty = False
        else:
            blank = True
        entry[name] = value
    for c in el:
        name = children.get(c.tag)
        if name is None:
            if not isinstance(c.tag, str):     # a comment, a processing instruction, an entity
                continue
            raise Unmapped(f"{el.tag}/{c.tag} is not in the catalogue")
        if len(c) and _children(c):
            raise Unmapped(f"{el.tag}/{c.tag} has unexpected nested elements")
        value = c.text
        if value and (value := value.strip()):
            entry[name] = value
        else:
            entry[name] = ""
            blank = True
        empty = False
    own = el.text
    if own and (own := own.strip()):
        if not text:
            raise Unmapped(f"{el.tag} carries text where the catalogue expects elements")
        entry["TEXT"] = own
        empty = False
    if blank:
        entry = {k: v for k, v in entry.items() if v != "" or k == seq}
    return entry, empty


def entry_of(el: etree._Element, *, seq_attr: str | None, children: tuple[str, ...],
             attrs: tuple[str, ...] = (), text: bool = False) -> dict[str, str]:
    """An element's parts by the entry rule (``_entry``), for names given by the caller."""
    return _entry(el, seq_attr, _names(seq_attr, *attrs), _names(*children), text)[0]


def _group(elements: list[etree._Element], rule: Rule) -> list[dict[str, str]] | None:
    """Entries of a repeated group in input order; None means Clear (every element empty, or every
    sequence "0").

    The one place every message line (FLOP, ADFT, snapshot FLTR) checks a group (D25, US-03 AC2):
    at most ``rule.cap`` entries, and where the group is sequenced every entry carries an
    integer sequence 0..999, no two alike. Zero mixed with non-zero sequences is a structural error
    (D7, FS §5.2), and so is a zero entry carrying a value (``<GTDT GTNO="0"><GATE>A1</GATE>``):
    the clear marker is the bare element.
    """
    if len(elements) > rule.cap:
        raise Unmapped(f"{rule.key}: {len(elements)} entries exceed the limit of {rule.cap}")
    assert rule.attrs is not None and rule.children is not None
    seq, attrs, children, text = rule.seq, rule.attrs, rule.children, rule.text
    entries: list[dict[str, str]] = []
    all_empty = True
    for el in elements:
        entry, empty = _entry(el, seq, attrs, children, text)
        entries.append(entry)
        all_empty = all_empty and empty
    if all_empty:
        return None
    if seq is None:
        return entries
    sequences = [_sequence(rule.key, seq, e.get(seq, "")) for e in entries]
    if 0 not in sequences and len(set(sequences)) == len(sequences):
        return entries
    if all(n == 0 for n in sequences):
        carrying = [k for e in entries for k in e if k != seq]
        if carrying:
            # "0" is the protocol's clear marker, a bare element (FS §4.3 "单条且全 0"); one that
            # also carries a value is a contradiction, refused rather than guessed as a clear
            raise Unmapped(f"{rule.key}: {seq}=0 is the clear marker but carries {', '.join(sorted(set(carrying)))}")
        return None
    if 0 in sequences:
        raise Unmapped(f"{rule.key}: {seq}=0 mixed with other entries")
    repeated = sorted({n for n in sequences if sequences.count(n) > 1})
    raise Unmapped(f"{rule.key}: {seq} {', '.join(map(str, repeated))} appears more than once")


def collection_entries(elements: list[etree._Element],
                       spec: CollectionSpec | TextGroupSpec) -> list[dict[str, str]] | None:
    """``spec``'s group read from ``elements`` (``_group``): its entries, or None for Clear."""
    return _group(elements, RULES[spec.key])


def is_sequence(raw: str) -> bool:
    """Whether a sequence attribute's value is an integer 0..999 (D25): ASCII digits, at most three
    after leading zeros (so ``int`` never reads a huge number)."""
    return raw.isascii() and raw.isdigit() and len(raw.lstrip("0")) <= 3 and int(raw) <= SEQUENCE_MAX


# "0".."999" as written without leading zeros, the way nearly every sequence attribute comes: a
# lookup instead of ``is_sequence`` and ``int`` for each of a package's 90,000 entries (P26, instruction counts)
PLAIN_SEQUENCES = {str(n): n for n in range(SEQUENCE_MAX + 1)}


def sequence_value(raw: str) -> int | None:
    """A sequence attribute's value as an integer 0..999 (D25), or None when it is not one."""
    n = PLAIN_SEQUENCES.get(raw)
    if n is not None:
        return n
    return int(raw) if is_sequence(raw) else None


def _sequence(key: str, seq: str, raw: str) -> int:
    n = PLAIN_SEQUENCES.get(raw)
    if n is not None:
        return n
    if is_sequence(raw):
        return int(raw)
    shown = raw if len(raw) <= 20 else raw[:20] + "..."
    raise Unmapped(f"{key}@{seq}={shown!r} is not an integer 0..{SEQUENCE_MAX}")


def sequence_number(spec: CollectionSpec | TextGroupSpec, raw: str) -> int:
    """A sequence attribute's value as an integer 0..999 (D25), or Unmapped naming it."""
    assert spec.seq_attr is not None
    return _sequence(spec.key, spec.seq_attr, raw)


def _object(el: etree._Element, rule: Rule) -> dict[str, str] | None:
    """An exception object's parts; None means Clear (empty element, D7)."""
    assert rule.attrs is not None and rule.children is not None
    try:
        value, empty = _entry(el, None, rule.attrs, rule.children, rule.text)
    except Unmapped:
        if is_empty(el):         # an empty element clears, whatever names it uses
            return None
        raise
    if empty:
        return None
    for attr, allowed in rule.enums:
        v = value.get(attr)
        if v and v not in allowed:
            raise Unmapped(f"{rule.key}@{attr}={v!r} is not one of {'/'.join(allowed)}")
    return value or None


def object_value(el: etree._Element, spec: ObjectSpec) -> dict[str, str] | None:
    """``spec``'s object read from ``el`` (``_object``): its parts, or None for Clear."""
    return _object(el, RULES[spec.key])


def _scalar(elements: list[etree._Element], tag: str) -> str | None:
    """A plain value's text; None (``CLEAR``) when it has none."""
    if len(elements) > 1:
        raise Unmapped(f"{tag} appears {len(elements)} times; it is a single value")
    el = elements[0]
    if (len(el) and _children(el)) or any(k[:1] != "{" for k in el.keys()):
        raise Unmapped(f"{tag} has attributes or elements where a plain value is expected")
    text = el.text
    return (text.strip() or None) if text else None


CLEAR = None  # marker value in ``block_values``: the key is present and means Clear


def block_values(block: etree._Element, *, skip: tuple[str, ...] = ("FLID",)) -> dict[str, object]:
    """Every flight field a FLOP block or SCHD FLTR carries, as state values.

    Returns key -> value (str for scalars, list of entries for collections and text groups, dict
    for objects) or ``CLEAR`` for a present-but-empty element (D7). Repeated elements are grouped in
    input order. Anything the catalogue does not place raises ``Unmapped``; the first problem in
    that order is the one named.
    """
    grouped: dict[object, list[etree._Element]] = {}
    for child in block:
        tag = child.tag
        elements = grouped.get(tag)
        if elements is not None:
            elements.append(child)
        elif tag not in skip and isinstance(tag, str):
            grouped[tag] = [child]
    values: dict[str, object] = {}
    for tag, elements in grouped.items():
        rule = RULES.get(tag)        # type: ignore[call-overload]
        if rule is None:
            raise Unmapped(f"{block.tag}/{tag} is not in the catalogue")
        kind = rule.kind
        if kind == "scalar":
            el = elements[0]
            if len(elements) > 1 or len(el) or el.keys():     # the plain case read here, at once
                values[rule.key] = _scalar(elements, rule.key)
            else:
                text = el.text
                values[rule.key] = (text.strip() or None) if text else None
        elif kind == "group":
            values[rule.key] = _group(elements, rule)
        else:
            if len(elements) > 1:
                raise Unmapped(f"{tag} appears {len(elements)} times; it is a single object")
            values[rule.key] = _object(elements[0], rule)
    return values
