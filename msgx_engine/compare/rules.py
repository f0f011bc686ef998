"""The known-differences file: differences a go-live accepts, each with its reason.

YAML, a list under ``rules:``; each rule names a ``field`` (a document key, or ``*`` for any field
and for a flight missing on one side), an optional ``when`` (every condition given must hold) and a
``reason``::

    rules:
      - field: REMK
        when: {class: differs, here: present, there: absent, flight: {ADID: A}}
        reason: the old system drops remarks of arrivals

``when`` keys: ``class`` (``differs``, ``missing_here``, ``missing_there``, or a list of them);
``here`` / ``there`` (the field's value on that side: ``absent``, ``present`` or the exact value);
``flight`` (values the flight's document holds: this installation's, else the reference's);
``flids`` (a list of FLIDs). A file that does not parse, or a rule with an unknown key, is refused
with the rule's number: a typo must not silently explain nothing (or everything).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ANY_FIELD = "*"
DIFFERS, MISSING_HERE, MISSING_THERE = "differs", "missing_here", "missing_there"
CLASSES = (MISSING_HERE, MISSING_THERE, DIFFERS)
ABSENT, PRESENT = "absent", "present"
_RULE_KEYS = frozenset({"field", "when", "reason"})
_WHEN_KEYS = frozenset({"class", "here", "there", "flight", "flids"})
_NOTHING = object()


class RulesError(ValueError):
    """The known-differences file cannot be used; the message says where and why."""


@dataclass(frozen=True)
class Rule:
    number: int                 # 1-based position in the file, as the report names it
    field: str
    reason: str
    classes: frozenset[str] = frozenset(CLASSES)
    here: Any = _NOTHING        # _NOTHING: no condition on that side
    there: Any = _NOTHING
    flight: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    flids: frozenset[str] | None = None

    def matches(self, cls: str, name: str, here_value: Any, there_value: Any, doc: Mapping[str, Any]) -> bool:
        """``here_value``/``there_value``: the field's value on each side, ``None`` when absent
        (a JSON document never holds null: a cleared value is left out)."""
        if cls not in self.classes:
            return False
        if self.field != ANY_FIELD and self.field != name:
            return False
        if self.flids is not None and doc.get("FLID") not in self.flids:
            return False
        if not (_holds(self.here, here_value) and _holds(self.there, there_value)):
            return False
        return all(doc.get(k) == v for k, v in self.flight.items())

    def describe(self) -> dict[str, Any]:
        return {"rule": self.number, "field": self.field, "reason": self.reason}


def _holds(condition: Any, value: Any) -> bool:
    if condition is _NOTHING:
        return True
    if condition == ABSENT:
        return value is None
    if condition == PRESENT:
        return value is not None
    return bool(value == condition)


def parse_rules(data: Any, *, source: str = "known differences") -> list[Rule]:
    """Rules from the parsed YAML (``None`` or an empty file: no rules)."""
    if data is None:
        return []
    if not isinstance(data, Mapping) or set(data) - {"rules"}:
        raise RulesError(f"{source}: expected a mapping with one key, rules")
    items = data.get("rules") or []
    if not isinstance(items, Sequence) or isinstance(items, str):
        raise RulesError(f"{source}: rules must be a list")
    return [_rule(i, item, source) for i, item in enumerate(items, start=1)]


def _rule(number: int, item: Any, source: str) -> Rule:
    where = f"{source}, rule {number}"
    if not isinstance(item, Mapping):
        raise RulesError(f"{where}: a rule is a mapping with field, when and reason")
    unknown = set(item) - _RULE_KEYS
    if unknown:
        raise RulesError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
    name, reason = item.get("field"), item.get("reason")
    if not isinstance(name, str) or not name.strip():
        raise RulesError(f"{where}: field is missing (a document key, or * for any field)")
    if not isinstance(reason, str) or not reason.strip():
        raise RulesError(f"{where}: reason is missing: every accepted difference says why")
    when = item.get("when") or {}
    if not isinstance(when, Mapping):
        raise RulesError(f"{where}: when must be a mapping")
    unknown = set(when) - _WHEN_KEYS
    if unknown:
        raise RulesError(f"{where}: unknown condition(s) {', '.join(sorted(map(str, unknown)))}; "
                         f"known: {', '.join(sorted(_WHEN_KEYS))}")
    classes = when.get("class", list(CLASSES))
    classes = [classes] if isinstance(classes, str) else classes
    if not isinstance(classes, list) or not classes or any(c not in CLASSES for c in classes):
        raise RulesError(f"{where}: class must be one or more of {', '.join(CLASSES)}")
    if name != ANY_FIELD and set(classes) & {MISSING_HERE, MISSING_THERE}:
        if DIFFERS not in classes:
            raise RulesError(f"{where}: a flight missing on one side is field *, not {name}")
        classes = [DIFFERS]
    flight = when.get("flight") or {}
    if not isinstance(flight, Mapping):
        raise RulesError(f"{where}: flight must be a mapping of field to value")
    flids = when.get("flids")
    if flids is not None and (not isinstance(flids, list) or not all(isinstance(f, str | int) for f in flids)):
        raise RulesError(f"{where}: flids must be a list of FLIDs")
    return Rule(number=number, field=name.strip(), reason=" ".join(reason.split()),
                classes=frozenset(classes), here=when.get("here", _NOTHING), there=when.get("there", _NOTHING),
                flight=dict(flight), flids=frozenset(str(f) for f in flids) if flids is not None else None)


def load_rules(path: Path) -> list[Rule]:
    """Read and parse a known-differences file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RulesError(f"cannot read the known-differences file {path}: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RulesError(f"{path} is not valid YAML: {' '.join(str(exc).split())}") from exc
    return parse_rules(data, source=str(path))
