"""Turn SIS elements into state values, strictly: nothing in a message is dropped silently.

An element or attribute that the catalogue does not know raises ``Unmapped`` (the message goes
DEAD(malformed) naming it), unless it is only whitespace.
"""

from __future__ import annotations

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
    """No text, no child elements and no non-empty attribute: a clear marker (D7)."""
    return not text_of(el) and not _children(el) and not any(v.strip() for v in el.attrib.values())


def entry_of(el: etree._Element, *, seq_attr: str | None, children: tuple[str, ...],
             attrs: tuple[str, ...] = (), text: bool = False) -> dict[str, str]:
    entry: dict[str, str] = {}
    for name, value in el.attrib.items():
        if name.startswith("{"):
            continue
        if name != seq_attr and name not in attrs:
            raise Unmapped(f"{el.tag}@{name} is not in the catalogue")
        entry[name] = value.strip()
    for child in _children(el):
        if child.tag not in children:
            raise Unmapped(f"{el.tag}/{child.tag} is not in the catalogue")
        if _children(child):
            raise Unmapped(f"{el.tag}/{child.tag} has unexpected nested elements")
        entry[child.tag] = text_of(child)
    own = text_of(el)
    if own:
        if not text:
            raise Unmapped(f"{el.tag} carries text where the catalogue expects elements")
        entry["TEXT"] = own
    return {k: v for k, v in entry.items() if v != "" or k == seq_attr}


def collection_entries(elements: list[etree._Element],
                       spec: CollectionSpec | TextGroupSpec) -> list[dict[str, str]] | None:
    """Entries of a repeated group in input order; None means Clear (every element empty, or every
    sequence "0").

    The one place every message line (FLOP, ADFT, snapshot FLTR) checks a group (D25, US-03 AC2):
    at most ``spec.max_entries`` entries, and where the group is sequenced every entry carries an
    integer sequence 0..999, no two alike. Zero mixed with non-zero sequences is a structural error
    (D7, FS §5.2), and so is a zero entry carrying a value (``<GTDT GTNO="0"><GATE>A1</GATE>``):
    the clear marker is the bare element.
    """
    if len(elements) > spec.max_entries:
        raise Unmapped(f"{spec.key}: {len(elements)} entries exceed the limit of {spec.max_entries}")
    attrs = getattr(spec, "attrs", ())
    text = getattr(spec, "text", False)
    entries = [entry_of(e, seq_attr=spec.seq_attr, children=spec.children, attrs=attrs, text=text)
               for e in elements]
    if all(is_empty(x) for x in elements):
        return None
    if spec.seq_attr:
        sequences = [sequence_number(spec, e.get(spec.seq_attr, "")) for e in entries]
        if all(n == 0 for n in sequences):
            carrying = [k for e in entries for k in e if k != spec.seq_attr]
            if carrying:
                # "0" is the protocol's clear marker, a bare element (FS §4.3 "单条且全 0"); one that
                # also carries a value is a contradiction, refused rather than guessed as a clear
                raise Unmapped(f"{spec.key}: {spec.seq_attr}=0 is the clear marker but carries "
                               f"{', '.join(sorted(set(carrying)))}")
            return None
        if 0 in sequences:
            raise Unmapped(f"{spec.key}: {spec.seq_attr}=0 mixed with other entries")
        repeated = sorted({n for n in sequences if sequences.count(n) > 1})
        if repeated:
            raise Unmapped(f"{spec.key}: {spec.seq_attr} {', '.join(map(str, repeated))} appears more than once")
    return entries


def is_sequence(raw: str) -> bool:
    """Whether a sequence attribute's value is an integer 0..999 (D25): ASCII digits, at most three
    after leading zeros (so ``int`` never reads a huge number)."""
    return raw.isascii() and raw.isdigit() and len(raw.lstrip("0")) <= 3 and int(raw) <= SEQUENCE_MAX


# "0".."999" as written without leading zeros, the way nearly every sequence attribute comes: a
# lookup instead of ``is_sequence`` and ``int`` for each of a package's 90,000 entries (P26)
PLAIN_SEQUENCES = {str(n): n for n in range(SEQUENCE_MAX + 1)}


def sequence_value(raw: str) -> int | None:
    """A sequence attribute's value as an integer 0..999 (D25), or None when it is not one."""
    n = PLAIN_SEQUENCES.get(raw)
    if n is not None:
        return n
    return int(raw) if is_sequence(raw) else None


def sequence_number(spec: CollectionSpec | TextGroupSpec, raw: str) -> int:
    """A sequence attribute's value as an integer 0..999 (D25), or Unmapped naming it."""
    n = sequence_value(raw)
    if n is None:
        shown = raw if len(raw) <= 20 else raw[:20] + "..."
        raise Unmapped(f"{spec.key}@{spec.seq_attr}={shown!r} is not an integer 0..{SEQUENCE_MAX}")
    return n


def object_value(el: etree._Element, spec: ObjectSpec) -> dict[str, str] | None:
    """An exception object's parts; None means Clear (empty element, D7)."""
    if is_empty(el):
        return None
    value = entry_of(el, seq_attr=None, children=spec.children, attrs=spec.attrs, text=spec.text)
    for attr, allowed in spec.enums:
        v = value.get(attr)
        if v and v not in allowed:
            raise Unmapped(f"{spec.key}@{attr}={v!r} is not one of {'/'.join(allowed)}")
    return value or None


CLEAR = None  # marker value in ``block_values``: the key is present and means Clear


def block_values(block: etree._Element, *, skip: tuple[str, ...] = ("FLID",)) -> dict[str, object]:
    """Every flight field a FLOP block or SCHD FLTR carries, as state values.

    Returns key -> value (str for scalars, list of entries for collections and text groups, dict
    for objects) or ``CLEAR`` for a present-but-empty element (D7). Repeated elements are grouped in
    input order. Anything the catalogue does not place raises ``Unmapped``.
    """
    grouped: dict[str, list[etree._Element]] = {}
    for child in _children(block):
        if child.tag in skip:
            continue
        grouped.setdefault(child.tag, []).append(child)
    values: dict[str, object] = {}
    for tag, elements in grouped.items():
        if tag in COLLECTION_BY_KEY or tag in TEXT_GROUP_BY_KEY:
            spec = COLLECTION_BY_KEY.get(tag) or TEXT_GROUP_BY_KEY[tag]
            values[tag] = collection_entries(elements, spec)
        elif tag in OBJECT_BY_KEY:
            if len(elements) > 1:
                raise Unmapped(f"{tag} appears {len(elements)} times; it is a single object")
            values[tag] = object_value(elements[0], OBJECT_BY_KEY[tag])
        elif tag in SCALARS:
            if len(elements) > 1:
                raise Unmapped(f"{tag} appears {len(elements)} times; it is a single value")
            el = elements[0]
            if _children(el) or any(k for k in el.attrib if not k.startswith("{")):
                raise Unmapped(f"{tag} has attributes or elements where a plain value is expected")
            values[tag] = text_of(el) or CLEAR
        else:
            raise Unmapped(f"{block.tag}/{tag} is not in the catalogue")
    return values
