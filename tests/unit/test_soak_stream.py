"""``bench/soak_stream.py``: demo days back to back keep the demo's trouble and nothing more.

The soak benchmark's figures mean something only if its mix is the demo day's: each day's verbatim
repeats and its reused identity must still collide with their originals (SKIPPED duplicate and
identity_conflict, US-03), and no other message of the whole stream may share an identity
(``SNDR|TYPE|STYP|SEQN``) with another, or later days would end as duplicates of earlier ones.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections import Counter
from datetime import date, timedelta
from pathlib import Path

from msgx_engine.demo.day import demo_day

_SPEC = importlib.util.spec_from_file_location(
    "soak_stream", Path(__file__).resolve().parents[2] / "bench" / "soak_stream.py")
assert _SPEC is not None and _SPEC.loader is not None
soak_stream = importlib.util.module_from_spec(_SPEC)
sys.modules["soak_stream"] = soak_stream         # its dataclasses look their module up
_SPEC.loader.exec_module(soak_stream)

_META = re.compile(r"<SNDR>(.*?)</SNDR>.*?<SEQN>(\d+)</SEQN>.*?<TYPE>(.*?)</TYPE>.*?<STYP>(.*?)</STYP>", re.S)


def _identity(body: str) -> tuple[str, ...] | None:
    found = _META.search(body)
    return found.groups() if found else None       # a body cut in half may have lost its META


def test_two_days_collide_only_where_the_demo_means_them_to():
    first = date(2026, 3, 1)
    seqns = soak_stream.SeqnCounter()
    days = [soak_stream.day_bodies(k, first, seqns) for k in range(2)]
    meant = 0
    for k, bodies in enumerate(days):
        demo = demo_day(first + timedelta(days=k), seed=soak_stream.DEFAULT_SEED + k)
        meant += sum(1 for m in demo.messages if m.expect[1] in ("duplicate", "identity_conflict"))
        assert len(bodies) == len(demo.messages) + 1                  # the day plus its RESP
        assert sum("<STYP>RESP</STYP>" in b for b in bodies) == 1
    identities = Counter(i for bodies in days for b in bodies if (i := _identity(b)) is not None)
    repeated = sum(n - 1 for n in identities.values() if n > 1)
    assert meant and repeated == meant
    assert not set(days[0]) & set(days[1])


def test_the_counter_wraps_as_the_aodbs_does():
    counter = soak_stream.SeqnCounter()
    counter.n = soak_stream.SEQN_MAX - 1
    assert [counter.next(), counter.next(), counter.next()] == [soak_stream.SEQN_MAX, 1, 2]
