"""What the demo prints after the day went through the pump: outcomes by TYPE/STYP and status,
the reasons, how long it took, three example flights, and whether the day came out as promised."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import Engine

from msgx_engine.demo.day import DemoDay
from msgx_engine.state.serialize import state_document
from msgx_engine.store import queue_figures
from msgx_engine.store.flights import FlightRepository
from msgx_engine.store.queue import OPEN, Status

STATUSES = (Status.SUCCEEDED, Status.SKIPPED, Status.DEAD, Status.FAILED, Status.PENDING)


@dataclass(frozen=True)
class Outcome:
    kind: str                 # TYPE/STYP, "(unreadable)" for a body whose META could not be read
    status: str
    reason: str | None
    count: int


@dataclass(frozen=True)
class Processed:
    outcomes: tuple[Outcome, ...]
    span: timedelta | None    # first registration to last terminal status

    def by_status(self) -> Counter[str]:
        return Counter({s: sum(o.count for o in self.outcomes if o.status == s) for s in STATUSES})

    def by_outcome(self) -> Counter[tuple[str, str | None]]:
        c: Counter[tuple[str, str | None]] = Counter()
        for o in self.outcomes:
            c[(o.status, o.reason)] += o.count
        return c

    @property
    def open(self) -> int:
        return sum(o.count for o in self.outcomes if o.status in OPEN)


def processed(engine: Engine) -> Processed:
    with engine.connect() as conn:
        rows = queue_figures.outcome_counts(conn)
        first, last = queue_figures.processing_span(conn)
    outcomes = tuple(sorted((Outcome(f"{t}/{s}" if t else "(unreadable)", status, reason, n)
                             for t, s, status, reason, n in rows), key=lambda o: (o.kind, o.status, o.reason or "")))
    return Processed(outcomes, last - first if first is not None and last is not None else None)


def kind_table(outcomes: Iterable[Outcome]) -> list[str]:
    """One row per TYPE/STYP, one column per status."""
    counts: dict[str, Counter[str]] = {}
    for o in outcomes:
        counts.setdefault(o.kind, Counter())[o.status] += o.count
    lines = [f"{'TYPE/STYP':<13}" + "".join(f"{s:>11}" for s in STATUSES)]
    for kind in sorted(counts):
        lines.append(f"{kind:<13}" + "".join(f"{counts[kind][s]:>11}" for s in STATUSES))
    total: Counter[str] = sum(counts.values(), Counter())
    lines.append(f"{'total':<13}" + "".join(f"{total[s]:>11}" for s in STATUSES))
    return lines


def reason_table(outcomes: Iterable[Outcome]) -> list[str]:
    c: Counter[tuple[str, str]] = Counter()
    for o in outcomes:
        if o.status != Status.SUCCEEDED:
            c[(o.status, o.reason or "-")] += o.count
    return [f"{status:<10}{reason:<22}{n:>6}" for (status, reason), n in sorted(c.items())]


def _names(entries: object, key: str) -> str:
    if not isinstance(entries, list):
        return "-"
    return ",".join(str(e.get(key)) for e in entries if isinstance(e, Mapping) and e.get(key)) or "-"


def flight_line(doc: Mapping[str, object]) -> str:
    """One line a duty manager would read: who, when, where, what happened."""
    parts = [f"{doc.get('FLNO', '?'):<7} {'arr' if doc.get('MVIN') == 'A' else 'dep'} "
             f"{doc.get('SODT', '?')} stand {doc.get('STND', '-'):<4} est {doc.get('ESTT', '-'):<11} "
             f"act {doc.get('ACTT', '-'):<11} v{doc.get('STATE_VERSION')}"]
    if doc.get("GTDT"):
        parts.append(f"gate {_names(doc['GTDT'], 'GATE')}")
    if doc.get("CLDT"):
        parts.append(f"belt {_names(doc['CLDT'], 'BELT')}")
    if doc.get("DELY"):
        parts.append(f"delay code {_names(doc['DELY'], 'CODE')}")
    fdiv = doc.get("FDIV")
    if isinstance(fdiv, Mapping) and fdiv.get("DDES"):
        parts.append(f"DIVERTED to {fdiv['DDES']} ({fdiv.get('TEXT') or 'no reason given'})")
    if doc.get("MAFL"):
        parts.append(f"code-share {_names(doc['MAFL'], 'FLNO')}")
    if doc.get("CNCL"):
        parts.append(f"CANCELLED {doc['CNCL']}")
    return f"  FLID {doc['FLID']}  " + ", ".join(parts)


def example_flights(engine: Engine, flids: Iterable[str]) -> list[str]:
    flids = list(flids)
    with engine.connect() as conn, conn.begin():
        states = FlightRepository(conn).load(flids)
    return [flight_line(state_document(states[f])) for f in flids if f in states]


def report(day: DemoDay, done: Processed, *, run_seconds: float, examples: list[str]) -> tuple[list[str], bool]:
    """The printed summary and whether the day came out as the generator promised."""
    promised = day.expected_outcomes()
    got = done.by_outcome()
    ok = got == promised and done.open == 0
    span = f"{done.span.total_seconds():.1f} s from first registration to last verdict" if done.span else "-"
    as_of = f", as of {day.now:%H:%M}" if day.now is not None else ""
    lines = [f"demo day {day.day.isoformat()} (seed {day.seed}{as_of}): {len(day.messages)} messages, "
             f"{len(day.flights)} flights",
             f"pump_job through Dagster: {run_seconds:.1f} s wall clock (with run start-up); {span}",
             "", *kind_table(done.outcomes), "", "not SUCCEEDED, by reason:", *reason_table(done.outcomes),
             "", "three flights of the day:", *examples, ""]
    if ok:
        lines.append("every message reached the verdict the demo day promises")
    else:
        for key in sorted(set(promised) | set(got), key=str):
            if promised[key] != got[key]:
                lines.append(f"MISMATCH {key}: promised {promised[key]}, got {got[key]}")
        if done.open:
            lines.append(f"{done.open} message(s) still open")
    return lines, ok
