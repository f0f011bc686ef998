"""``outbox.StateEvents``: a snapshot's ``schd`` rows built as they are read (P29, FS §5.5).

The rows a snapshot writes are the same whether they are built first or while COPY sends them:
these tests hold the lazy sequence equal, row for row, to the list ``state_event`` and the
tombstones make, and check that a row over the record limit is refused when it is reached."""

from __future__ import annotations

from datetime import date
from types import MappingProxyType

import pytest

from msgx_engine.state.model import FlightState
from msgx_engine.store import outbox


def _states(n: int) -> list[FlightState]:
    return [FlightState(flid=f"F{i:03d}", fields=MappingProxyType({"ALCD": "YG", "FLNO": f"YG{i:04d}"}),
                        fday=date(2026, 12, 2), state_version=1, last_message_id=7, deleted=False)
            for i in range(n)]


def test_state_events_equal_the_eager_rows_in_order():
    """FS §5.5: one whole-state ``schd`` row per written flight, then the tombstones, in order."""
    states = _states(5)
    tombstones = [outbox.tombstone_event(7, "G001", 3)]
    lazy = outbox.StateEvents(7, states, tombstones)
    eager = [outbox.state_event(7, s) for s in states] + tombstones
    assert len(lazy) == 6
    assert list(lazy) == eager
    assert [lazy[i] for i in range(6)] == eager
    assert lazy[-1] == tombstones[0] and lazy[1:3] == eager[1:3]
    with pytest.raises(IndexError):
        lazy[6]


def test_a_row_over_the_limit_is_refused_when_it_is_reached():
    """The rows before the oversize one pass, the oversize one raises."""
    states = _states(3)
    big = FlightState(flid="BIG", fields=MappingProxyType({"REMK": "x" * 4000}), fday=date(2026, 12, 2),
                      state_version=1, last_message_id=7, deleted=False)
    passed: list[str] = []
    with pytest.raises(outbox.RecordTooLarge, match="flight BIG"):
        for row in outbox._checked(outbox.StateEvents(7, [*states, big]), 2048):
            passed.append(row.flid)
    assert passed == ["F000", "F001", "F002"]
