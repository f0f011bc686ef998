"""The comparison itself, pure: two sets of whole-state documents keyed by FLID in, classified
differences out. No I/O: ``sources`` reads, ``report`` renders.

Scope: a FLID is compared when its document on either side belongs to the selected days (the live
days: FDAY from yesterday, airport time, on; or one ``--day``). A document without FDAY is taken as
live (it cannot be placed on a day) and left out of a single day. Deciding per FLID on both sides
means a flight whose FDAY differs shows as that field differing, not as missing.

Not compared by default (``VOLATILE``): ``STATE_VERSION``, msgx's own count of the changes applied to
a flight. Two installations that apply the same business content through different message
histories (a shadow started late, a state recovered from a backup, the old system, which has no
such counter) hold different numbers for identical flights. ``FLID`` is the key itself. Everything
else in the document is business content (FDAY and the derived airbridges included) and compared.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from msgx_engine.compare.rules import ANY_FIELD, DIFFERS, MISSING_HERE, MISSING_THERE, Rule

VOLATILE = frozenset({"STATE_VERSION"})
EXPLAINED = "explained"
FLIGHT = ANY_FIELD          # the field a missing flight is counted under


@dataclass(frozen=True)
class Scope:
    """Which days are compared: every FDAY from ``since`` on (the live days), or exactly ``day``."""

    since: date | None = None
    day: date | None = None

    def holds(self, doc: Mapping[str, Any] | None) -> bool:
        if doc is None:
            return False
        fday = doc.get("FDAY")
        if not isinstance(fday, str):
            return self.day is None
        if self.day is not None:
            return fday == self.day.isoformat()
        return self.since is None or fday >= self.since.isoformat()

    def describe(self) -> str:
        if self.day is not None:
            return f"flight day {self.day.isoformat()}"
        if self.since is not None:
            return f"live days: flight day {self.since.isoformat()} and later (and flights without one)"
        return "every flight"


@dataclass(frozen=True)
class Difference:
    flid: str
    field: str              # a document key, or ``*`` for a flight missing on one side
    kind: str               # missing_here, missing_there or differs: what was found
    here: Any               # the value here (None: absent; a whole document for missing_there)
    there: Any
    rule: int | None = None  # the known-differences rule that explains it

    @property
    def cls(self) -> str:
        """The class reported: ``explained`` when a rule explains it, else what was found."""
        return EXPLAINED if self.rule is not None else self.kind


@dataclass
class Comparison:
    scope: Scope
    here_total: int
    there_total: int
    compared: int                       # FLIDs in scope on either side
    equal: int                          # of those, identical in every compared field
    differences: list[Difference]
    rules: Sequence[Rule]
    rule_hits: dict[int, int]
    ignored: frozenset[str] = field(default_factory=lambda: VOLATILE)

    @property
    def unexplained(self) -> int:
        return sum(1 for d in self.differences if d.rule is None)

    def by_class(self) -> dict[str, int]:
        counts = {MISSING_HERE: 0, MISSING_THERE: 0, DIFFERS: 0, EXPLAINED: 0}
        for d in self.differences:
            counts[d.cls] += 1
        return counts

    @property
    def unused_rules(self) -> list[Rule]:
        return [r for r in self.rules if not self.rule_hits.get(r.number)]


def compare(here: Mapping[str, Mapping[str, Any]], there: Mapping[str, Mapping[str, Any]], *,
            rules: Sequence[Rule] = (), scope: Scope | None = None,
            ignored: Iterable[str] = VOLATILE) -> Comparison:
    """Every difference between ``here`` (this installation) and ``there`` (the reference)."""
    scope = scope or Scope()
    skip = frozenset(ignored) | {"FLID"}
    hits = {r.number: 0 for r in rules}
    found: list[Difference] = []
    compared = equal = 0
    for flid in sorted(here.keys() | there.keys()):
        a, b = here.get(flid), there.get(flid)
        if not (scope.holds(a) or scope.holds(b)):
            continue
        compared += 1
        if a is None or b is None:
            kind = MISSING_HERE if a is None else MISSING_THERE
            doc = b if a is None else a
            assert doc is not None
            found.append(_classified(Difference(flid, FLIGHT, kind, a, b), rules, hits, doc))
            continue
        before = len(found)
        if a != b:
            for name in sorted((a.keys() | b.keys()) - skip):
                va, vb = a.get(name), b.get(name)
                if va != vb:
                    found.append(_classified(Difference(flid, name, DIFFERS, va, vb), rules, hits, a))
        if len(found) == before:
            equal += 1
    return Comparison(scope=scope, here_total=len(here), there_total=len(there), compared=compared, equal=equal,
                      differences=found, rules=list(rules), rule_hits=hits, ignored=frozenset(ignored))


def _classified(d: Difference, rules: Sequence[Rule], hits: dict[int, int], doc: Mapping[str, Any]) -> Difference:
    """The first rule that explains ``d`` (its hit counted), or ``d`` unexplained."""
    for rule in rules:
        if rule.matches(d.kind, d.field, d.here, d.there, doc):
            hits[rule.number] += 1
            return Difference(d.flid, d.field, d.kind, d.here, d.there, rule.number)
    return d
