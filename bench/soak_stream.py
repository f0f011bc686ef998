"""The soak benchmark's message stream: demo days one after another, as the AODB would send them.

Each simulated day is ``msgx_engine.demo.day.demo_day`` for the next date (its own seed): the nine
reference packages, the SCHD DNLD of the day's 241 flights, the FLOP stream (estimates, actuals,
gates, stands, desks, belts, boarding, delays, cancellations, a diversion, a code-share MAFL, an
FDEL) and the day's trouble (malformed bodies, verbatim repeats, a reused identity with other
content, ignored load messages, one unsupported type), plus one reference RESP (the gate list
again as an answer; no request is in flight, so msgx records it unanswered). About 1,233
messages a day.

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
from datetime import date, timedelta

from msgx_engine.demo.day import DEFAULT_SEED, demo_day

_SEQN = re.compile(r"<SEQN>(\d+)</SEQN>")
SEQN_MAX = 999_999              # SIS SEQNs are 1-6 digits; the counter wraps as the AODB's does


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


def day_bodies(k: int, first: date, seqns: SeqnCounter) -> list[str]:
    """Day ``k``'s bodies in mailbox order, SEQNs renumbered (a repeat keeps its original's)."""
    day = demo_day(first + timedelta(days=k), seed=DEFAULT_SEED + k)
    bodies = [m.body for m in day.messages]
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


def stream(first: date) -> Iterator[StreamMessage]:
    """Demo days from ``first`` on, without end."""
    seqns = SeqnCounter()
    k = 0
    while True:
        for body in day_bodies(k, first, seqns):
            yield StreamMessage(k, body)
        k += 1
