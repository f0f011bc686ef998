"""``msgx compare``: read both sides, compare, render; the exit status a script or a job acts on.

0: nothing unexplained; 1: at least one unexplained difference; 2: a side (or the known-differences
file) cannot be read, with the reason on one line. Both sides are only read.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path

from msgx_engine.compare import report
from msgx_engine.compare.diff import Scope, compare
from msgx_engine.compare.rules import Rule, RulesError, load_rules
from msgx_engine.compare.sources import SourceUnreadable, read_postgresql, read_reference
from msgx_engine.sis.times import LOCAL_TZ

EXIT_SAME, EXIT_DIFFERENT, EXIT_UNREADABLE = 0, 1, 2


@dataclass(frozen=True)
class Outcome:
    code: int
    output: str = ""        # the report (stdout)
    error: str = ""         # the one-line reason of exit 2 (stderr)
    report: dict | None = None


def live_since(now: datetime | None = None) -> date:
    """The first live day: yesterday, airport time (a flight of yesterday may still be in the air)."""
    return (now or datetime.now(LOCAL_TZ)).astimezone(LOCAL_TZ).date() - timedelta(days=1)


def run(here_url: str, against: str, *, day: date | None = None, known: Path | None = None,
        key: str | None = None, as_json: bool = False, now: datetime | None = None) -> Outcome:
    try:
        rules: list[Rule] = load_rules(known) if known is not None else []
    except RulesError as exc:
        return Outcome(EXIT_UNREADABLE, error=str(exc))
    try:
        there = read_reference(against, key=key)
    except SourceUnreadable as exc:
        return Outcome(EXIT_UNREADABLE, error=f"reference unreadable: {exc}")
    try:
        here = read_postgresql(here_url)
    except SourceUnreadable as exc:
        return Outcome(EXIT_UNREADABLE, error=f"this installation unreadable: {exc}")
    scope = Scope(day=day) if day is not None else Scope(since=live_since(now))
    result = compare(here.documents, there.documents, rules=rules, scope=scope)
    doc = report.as_json(result, here=here.label, there=there.label)
    text = report.dumps(doc) if as_json else report.as_markdown(doc)
    return Outcome(EXIT_SAME if result.unexplained == 0 else EXIT_DIFFERENT, text, report=doc)
