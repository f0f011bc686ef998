"""The soak benchmark's message stream: demo days one after another, as the AODB would send them.

Each simulated day is ``msgx_engine.demo.day.demo_day`` for the next date (its own seed): the nine
reference packages, the SCHD DNLD of the day's 241 flights, the FLOP stream (estimates, actuals,
gates, stands, desks, belts, boarding, delays, cancellations, a diversion, a code-share MAFL, an
FDEL) and the day's trouble (malformed bodies, verbatim repeats, a reused identity with other
content, ignored load messages, one unsupported type), plus one reference RESP (the gate list
again as an answer; no request is in flight, so msgx records it unanswered). That is about 1,233
messages; an airport's AODB sends 50,000-100,000 a day, most of them revisions of what it sent
before. So a day of ``day_messages`` adds revisions: the day's routine FLOP messages (estimates,
gates, desks, belts, stand plans, stands, boarding, delays) of flights that are not cancelled,
deleted, diverted or code-shared, sent again in rounds, each round's times a minute later (a real
update, the FFID untouched), spread over the rest of the day after their original. Per-day work
(the DNLD, the reference packages, the nightly archiving) then weighs on the run as it does at an
airport, instead of once every 1,233 messages.

Every day of the demo counts its SEQNs from the same seeded start, so days replayed one after
another would collide on their identities (``SNDR|TYPE|STYP|SEQN``) inside the 24 h window and end
as duplicates: each day's SEQNs are renumbered from one counter over the whole stream, a repeat
keeping its original's number, so the repeats and the identity conflict stay exactly as the demo
means them and every other message is new.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from builders import gtdt  # tests/: the callers put it on the path

from msgx_engine.demo.day import DEFAULT_SEED, SUCCEEDED, DemoDay, demo_day
from msgx_engine.sis.times import MONTHS

_SEQN = re.compile(r"<SEQN>(\d+)</SEQN>")
SEQN_MAX = 999_999              # SIS SEQNs are 1-6 digits; the counter wraps as the AODB's does
# What the AODB revises during a day; and the times inside them a revision moves (never FFID's).
REVISED = frozenset({"FLOP/ESTT", "FLOP/GTDT", "FLOP/CKDT", "FLOP/CLDT", "FLOP/PSDT", "FLOP/STND",
                     "FLOP/BOTM", "FLOP/DELY"})
_NOT_REVISED = frozenset({"FLOP/CNCL", "FLOP/FDEL", "FLOP/FDIV", "FLOP/MAFL"})
_TIME = re.compile(r"<(ESTT|BOTM|PGOT|PGCT|PCOT|PCCT|STST|STET)>(\d{2})([A-Z]{3})(\d{2})(\d{2})(\d{2})<")


@dataclass(frozen=True)
class StreamMessage:
    day: int                    # simulated day, 0-based
    body: str


class SeqnCounter:
    """One SEQN counter for the whole stream (1..999999, then round again)."""

    def __init__(self) -> None:
        self.n = 0

    def next(self) -> int:
        self.n = self.n % SEQN_MAX + 1
        return self.n


def _later(match: re.Match[str], minutes: int) -> str:
    tag, dd, mon, yy, hh, mi = match.groups()
    t = datetime(2000 + int(yy), MONTHS.index(mon) + 1, int(dd), int(hh), int(mi)) + timedelta(minutes=minutes)
    return f"<{tag}>{t.day:02d}{MONTHS[t.month - 1]}{t.year % 100:02d}{t.hour:02d}{t.minute:02d}<"


def revision(body: str, round_: int) -> str:
    """``body`` sent again in revision round ``round_``: its times ``round_`` minutes later and its
    own identity (a SEQN no other message of the day has, before renumbering)."""
    moved = _TIME.sub(lambda m: _later(m, round_), body)
    return moved.replace("<SEQN>", f"<SEQN>8{round_:04d}", 1)


def with_revisions(day: DemoDay, bodies: list[str], day_messages: int) -> list[str]:
    """``bodies`` (the day in mailbox order, ``day.messages`` first) with revision rounds of its
    routine FLOP messages until the day holds about ``day_messages``: round j of the message at
    position i goes j/(rounds+1) of the way from i to the day's end."""
    troubled = {m.flid for m in day.messages if m.kind in _NOT_REVISED or m.expect != SUCCEEDED}
    revisable = [i for i, m in enumerate(day.messages)
                 if m.kind in REVISED and m.expect == SUCCEEDED and m.flid not in troubled]
    if not revisable or day_messages <= len(bodies):
        return bodies
    rounds = max(0, round((day_messages - len(bodies)) / len(revisable)))
    n = len(bodies)
    placed = [(float(i), 0, body) for i, body in enumerate(bodies)]
    for i in revisable:
        for j in range(1, rounds + 1):
            placed.append((i + j * (n - i) / (rounds + 1), j, revision(bodies[i], j)))
    return [body for _, _, body in sorted(placed, key=lambda p: (p[0], p[1]))]


def day_bodies(k: int, first: date, seqns: SeqnCounter, day_messages: int = 0) -> list[str]:
    """Day ``k``'s bodies in mailbox order, SEQNs renumbered (a repeat keeps its original's), with
    revisions up to about ``day_messages`` (0: the demo day alone)."""
    day = demo_day(first + timedelta(days=k), seed=DEFAULT_SEED + k)
    bodies = with_revisions(day, [m.body for m in day.messages], day_messages)
    glst = next(m.body for m in day.messages if m.kind == "GLST/DNLD")
    bodies.insert(len(bodies) // 2, glst.replace("<STYP>DNLD</STYP>", "<STYP>RESP</STYP>", 1)
                  .replace("<SEQN>", "<SEQN>9", 1))          # its own identity before renumbering
    renumbered: dict[str, int] = {}

    def renumber(match: re.Match[str]) -> str:
        old = match.group(1)
        if old not in renumbered:
            renumbered[old] = seqns.next()
        return f"<SEQN>{renumbered[old]}</SEQN>"

    return [_SEQN.sub(renumber, body, count=1) for body in bodies]


def stream(first: date, day_messages: int = 0) -> Iterator[StreamMessage]:
    """Demo days from ``first`` on, without end, each revised up to about ``day_messages``."""
    seqns = SeqnCounter()
    k = 0
    while True:
        for body in day_bodies(k, first, seqns, day_messages):
            yield StreamMessage(k, body)
        k += 1



def churn(flights: int) -> Iterator[StreamMessage]:
    """The churn shape: FLOP/GTDT messages round after round over ``flights`` flights (one to three
    gates each, a different set every round), so each flight is rewritten every ``flights``
    messages: a busy day compressed, or a long outage's catch-up, where a few thousand flights take
    about a hundred changes each while the pump runs."""
    seqns = SeqnCounter()
    k = 0
    while True:
        for f in range(flights):
            gates = ((n, f"G{(7 * k + 13 * n + f) % 60:02d}") for n in range(1, 2 + (k + f) % 3))
            yield StreamMessage(0, gtdt(f"CH{f:05d}", *gates, seqn=seqns.next()))
        k += 1
