"""Reconciliation of a daily snapshot with the state msgx built from dynamic messages (pure).

Before a DNLD/RESP for a day is applied, its full states are compared with the current states of
the same flights: per field, how many flights the snapshot changes, with up to ``EXAMPLES``
example FLIDs and their old/new values; the flights it adds (msgx has no live row for them) and
the flights it deletes (diff delete, D2, soft delete); the flights it leaves to a later day (D3, a flight's day). It
tells an operator how far the incremental state had drifted from the AODB's own view of the day.

Only message fields are compared (derived values such as the airbridges follow from them). The
comparison itself is set-based in the snapshot's transaction (``store.reconcile``): it yields the
(FLID, field) pairs that differ; this module turns them, with the old and new states of the few
example flights, into the report.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date

from msgx_engine.state.model import FlightState, Value
from msgx_engine.state.serialize import plain

EXAMPLES = 20
HEADLINE = ("fday", "styp", "flights", "compared", "differing", "added", "deleted", "kept_later",
            "fields_differing", "top_fields")     # the counts on the snapshot's asset event


def _shown(value: Value | None) -> object:
    return None if value is None else plain(value)


@dataclass
class FieldDrift:
    """Flights whose value of one field the snapshot changes, with the first examples by FLID."""

    flights: int = 0
    examples: list[dict[str, object]] = field(default_factory=list)


@dataclass(frozen=True)
class Reconciliation:
    day: date
    styp: str
    flights: int                                  # FLTR records in the package
    compared: int                                 # live in msgx and taken over by the snapshot
    differing: int                                # compared flights with at least one field changed
    fields: Mapping[str, FieldDrift]              # field -> drift, only fields that differ
    added: tuple[str, ...]                        # taken over without a live row in msgx (sorted)
    deleted: tuple[str, ...]                      # diff-deleted (sorted)
    kept_later: int                               # owned by a later day: not written, not compared

    def headline(self) -> dict[str, int | str]:
        """The counts for the snapshot's asset event (and the table's own columns)."""
        top = sorted(self.fields.items(), key=lambda kv: (-kv[1].flights, kv[0]))[:10]
        return {"fday": self.day.isoformat(), "styp": self.styp, "flights": self.flights,
                "compared": self.compared, "differing": self.differing, "added": len(self.added),
                "deleted": len(self.deleted), "kept_later": self.kept_later,
                "fields_differing": len(self.fields),
                "top_fields": ", ".join(f"{k}={d.flights}" for k, d in top)}

    def as_json(self) -> dict[str, object]:
        return {**self.headline(),
                "fields": {k: {"flights": d.flights, "examples": d.examples} for k, d in sorted(self.fields.items())},
                "added_examples": list(self.added[:EXAMPLES]), "deleted_examples": list(self.deleted[:EXAMPLES])}


def examples(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """Per differing field, its first ``EXAMPLES`` FLIDs in order."""
    by_field: dict[str, list[str]] = {}
    for flid, key in sorted(pairs):
        shown = by_field.setdefault(key, [])
        if len(shown) < EXAMPLES:
            shown.append(flid)
    return by_field


def reconcile(day: date, styp: str, flights: int, written: Iterable[FlightState], compared: Iterable[str],
              pairs: Iterable[tuple[str, str]], before: Mapping[str, FlightState], deleted: Iterable[str],
              kept_later: int) -> Reconciliation:
    """The report. ``compared``: the written flights that were live in msgx; ``pairs``: (FLID,
    field) that differ among them; ``before``: the old states of (at least) the example flights."""
    pairs = list(pairs)
    compared = set(compared)
    after = {s.flid: s for s in written}
    drift: dict[str, FieldDrift] = {}
    for _flid, key in pairs:
        drift.setdefault(key, FieldDrift()).flights += 1
    for key, flids in examples(pairs).items():
        drift[key].examples = [{"FLID": f, "old": _shown(before[f].fields.get(key)),
                                "new": _shown(after[f].fields.get(key))} for f in flids]
    return Reconciliation(day, styp, flights, len(compared), len({f for f, _ in pairs}), drift,
                          tuple(sorted(after.keys() - compared)), tuple(sorted(deleted)), kept_later)
