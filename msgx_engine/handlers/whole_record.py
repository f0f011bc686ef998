"""One pass from a snapshot FLTR to its whole state, for the records that need no judgement.

``snapshot_fields(block_values(record))`` checks every element against the catalogue through a
chain of small steps (group the children, an entry per element, the group rules, values to
fields, fields frozen and sorted). It is exact and names whatever it refuses, and a 10,000-flight
package walks it 10,000 times: about a third of the snapshot's time (issue 16).

``whole_record_fields`` walks a record once and builds the same frozen fields directly. It
decides only what is plainly valid: the moment anything would need a verdict (an element the
catalogue does not place, a repeated scalar or object, a namespaced attribute, a comment, a bad or
repeated sequence number, a group over its cap, an enum outside its values) it returns None, and
the caller runs the exact path, which gives the verdict and its wording. So a record's fields, or
its refusal, never depend on which path read it; ``tests/unit/test_whole_record.py`` holds the
two paths equal on the samples, the golden cases and generated records.

The pass runs compiled where ``pip install`` could build ``_record_walk.c`` (P35): the same rules
over libxml2's nodes, 4-5 times faster, handing back to the Python pass below whatever it does
not plainly recognise. ``records_fields`` takes a package's records in one call.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType, ModuleType

from lxml import etree

from msgx_engine.handlers.codeshare import DERIVED
from msgx_engine.handlers.extract import PLAIN_SEQUENCES, sequence_value
from msgx_engine.sis.fields import (
    COLLECTION_BY_KEY,
    OBJECT_BY_KEY,
    SCALARS,
    TEXT_GROUP_BY_KEY,
    CollectionSpec,
    TextGroupSpec,
)
from msgx_engine.state.model import Value

log = logging.getLogger(__name__)

Fields = Mapping[str, Value]
_SKIPPED = "FLID"        # the record's identity, read by the outline (block_values' ``skip``)

# The names a record may use, each mapped to the catalogue's own string: a key of the fields is
# that one object, not the copy lxml makes of each tag it reads. One lookup both tests a name and
# gives it; and the helper's part (P27) then repeats one object per name, which ``marshal`` writes
# once and refers back to: its answer reads back in half the time (issue 16, session 34).
_Names = dict[str, str]


def _names(names: Iterable[str]) -> _Names:
    return {name: name for name in names}


# Per group key: (sequence attribute, attributes allowed on an entry, child elements, own text
# allowed, entry cap). Collections and text groups follow the same entry rule (``entry_of``).
_GroupRule = tuple[str | None, _Names, _Names, bool, int]
_GROUP_SPECS: tuple[CollectionSpec | TextGroupSpec, ...] = (*COLLECTION_BY_KEY.values(), *TEXT_GROUP_BY_KEY.values())
_GROUPS: dict[str, _GroupRule] = {
    spec.key: (spec.seq_attr, _names(({spec.seq_attr} if spec.seq_attr else set()) | set(getattr(spec, "attrs", ()))),
               _names(spec.children), bool(getattr(spec, "text", False)), spec.max_entries)
    for spec in _GROUP_SPECS
}
# Per object key: (attributes, child elements, own text allowed, enum attribute -> allowed values).
_OBJECTS: dict[str, tuple[_Names, _Names, bool, dict[str, tuple[str, ...]]]] = {
    spec.key: (_names(spec.attrs), _names(spec.children), spec.text, dict(spec.enums))
    for spec in OBJECT_BY_KEY.values()
}
_SCALARS = _names(SCALARS)
_KEYS = _names((*_GROUPS, *_OBJECTS))


# The same pass compiled (``_record_walk.c``, P35): built by ``pip install`` where a C compiler
# is at hand, and handed these very rules. Where it is missing, or declines a record, the pass
# below runs; so a record's fields never depend on whether it was built.
# The C code reads lxml's element struct: ``configure`` first checks it on an element it knows.
def _compiled() -> ModuleType | None:
    try:
        from msgx_engine.handlers import _record_walk
    except ImportError:                # pragma: no cover - an install without a C compiler
        return None
    try:
        _record_walk.configure(_SCALARS, _KEYS, _GROUPS, _OBJECTS, _SKIPPED, DERIVED, PLAIN_SEQUENCES,
                               sequence_value, etree._Element, etree.fromstring('<P a="v">t</P>'))
    except RuntimeError as exc:        # pragma: no cover - an lxml unlike the one it was built against
        log.warning("snapshot records extracted in Python: %s", exc)
        return None
    return _record_walk


compiled = _compiled()


class _Undecided(Exception):
    """Something in the record needs the exact path's verdict."""


def whole_record_fields(record: etree._Element, *, frozen: bool = True) -> Fields | None:
    """``snapshot_fields(block_values(record))`` for a plainly valid record, or None: then the
    caller must take the exact path (which may refuse the record as ``Unmapped``). ``frozen=False``
    gives the same fields as plain dicts, which ``marshal`` can carry to another process
    (``package_split``, P27), where ``package_split.freeze`` makes them the frozen fields."""
    return records_fields((record,), frozen=frozen)[0]


def records_fields(records: Sequence[etree._Element], *, frozen: bool = True) -> list[Fields | None]:
    """``whole_record_fields`` of each record, the compiled pass first: one call for a whole
    package, where it is built, and the Python pass for whatever it declines."""
    if compiled is None:
        return [python_fields(record, frozen=frozen) for record in records]
    found: list[Fields | None] = compiled.fields_many(records, frozen)
    for i, fields in enumerate(found):
        if fields is None:
            found[i] = python_fields(records[i], frozen=frozen)
    return found


def python_fields(record: etree._Element, *, frozen: bool = True) -> Fields | None:
    """``whole_record_fields`` by the Python pass alone."""
    try:
        return _fields(record, frozen)
    except _Undecided:
        return None


def _fields(record: etree._Element, frozen: bool) -> Fields:
    fields: dict[str, Value] = {}
    scalars: set[str] = set()
    grouped: dict[str, list[etree._Element]] = {}
    for child in record:
        tag = child.tag
        name = _SCALARS.get(tag)
        if name is not None:
            if name in scalars or len(child) or child.attrib:
                raise _Undecided
            scalars.add(name)
            text = child.text
            if text and (text := text.strip()):
                fields[name] = text
        elif tag in _KEYS:
            elements = grouped.get(tag)
            if elements is None:
                grouped[tag] = [child]
            else:
                elements.append(child)
        elif tag != _SKIPPED:            # an unknown element, a comment or a processing instruction
            raise _Undecided
    for tag, elements in grouped.items():
        value = _group(tag, elements, frozen) if tag in _GROUPS else _object(tag, elements, frozen)
        if value is not None:
            fields[_KEYS[tag]] = value
    ordered = {k: fields[k] for k in sorted(fields) if k not in DERIVED}
    return MappingProxyType(ordered) if frozen else ordered


def _entry(el: etree._Element, seq: str | None, attrs: _Names, children: _Names,
           text: bool) -> tuple[dict[str, str], bool]:
    """``entry_of``'s entry of one element and whether the element is empty (``is_empty``)."""
    entry: dict[str, str] = {}
    empty = True
    blank = False          # a part with no value: only then do parts need filtering
    for attr, value in el.items():
        name = attrs.get(attr)
        if name is None:
            raise _Undecided
        value = value.strip()
        if value:
            empty = False
        else:
            blank = True
        entry[name] = value
    for c in el:
        name = children.get(c.tag)
        if name is None or len(c):
            raise _Undecided
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
            raise _Undecided
        entry["TEXT"] = own
        empty = False
    if blank:
        return {k: entry[k] for k in sorted(entry) if entry[k] != "" or k == seq}, empty
    return dict(sorted(entry.items())), empty


def _group(tag: str, elements: list[etree._Element], frozen: bool) -> tuple[Mapping[str, str], ...] | None:
    """``collection_entries`` then frozen entries; None: the group is cleared."""
    seq, attrs, children, text, cap = _GROUPS[tag]
    if len(elements) > cap:
        raise _Undecided
    entries: list[dict[str, str]] = []
    all_empty = True
    for el in elements:
        entry, empty = _entry(el, seq, attrs, children, text)
        entries.append(entry)
        all_empty = all_empty and empty
    if all_empty:
        return None
    if seq is not None:
        numbers = {_sequence(e.get(seq, "")) for e in entries}
        if len(numbers) != len(entries) or 0 in numbers:     # a repeat, or 0 beside others: a verdict
            if numbers == {0}:
                return None
            raise _Undecided
    return tuple(map(MappingProxyType, entries)) if frozen else tuple(entries)


def _sequence(raw: str) -> int:
    n = sequence_value(raw)
    if n is None:
        raise _Undecided
    return n


def _object(tag: str, elements: list[etree._Element], frozen: bool) -> Mapping[str, str] | None:
    """``object_value`` then a frozen entry; None: the object is cleared."""
    if len(elements) > 1:
        raise _Undecided
    attrs, children, text, enums = _OBJECTS[tag]
    value, empty = _entry(elements[0], None, attrs, children, text)
    if empty or not value:
        return None
    for attr, allowed in enums.items():
        v = value.get(attr)
        if v and v not in allowed:
            raise _Undecided
    return MappingProxyType(value) if frozen else value
