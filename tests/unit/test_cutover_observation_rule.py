"""The 48-hour observation after a cut-over, as a rule over hourly readings (OPS-4; decision O23):
every ended hour of the 48 needs a health reading, no dead letter and the oldest event under 5 s;
it is "watching" until the 48 hours are over, and rollback stays open for the first 24. Pure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from msgx_engine.compare.observation import observe
from msgx_engine.store.cutover_state import Takeover
from msgx_engine.store.parallel_run import Hour, Worst

AT = datetime(2026, 12, 7, 14, 20, tzinfo=UTC)
TOOK = Takeover("promote", 120345, "alice", AT)
H = timedelta(hours=1)


def hours(n: int, *, bad: dict[int, Worst] | None = None, skip: frozenset[int] = frozenset()) -> list[Hour]:
    start = AT.replace(minute=0)
    return [Hour(start + i * H, (bad or {}).get(i, Worst(0, 0.3, 120)), start + i * H, start + (i + 1) * H)
            for i in range(n) if i not in skip]


def test_48_clean_hours_pass_and_rollback_closes_after_24():
    doc = observe(TOOK, hours(49), AT + 49 * H)
    assert (doc["state"], doc["reasons"], doc["hours_ended"], doc["rollback_open"]) == ("passed", [], 48, False)
    assert doc["until"] == (AT + 48 * H).isoformat() and doc["rollback_until"] == (AT + 24 * H).isoformat()


def test_before_48_hours_it_is_watching_and_rollback_is_open_for_24():
    assert (observe(TOOK, hours(4), AT + 3 * H)["state"], observe(TOOK, hours(4), AT + 3 * H)["rollback_open"]) == (
        "watching", True)
    assert observe(TOOK, hours(26), AT + 25 * H)["rollback_open"] is False


def test_an_hour_with_a_long_wait_a_dead_letter_or_no_reading_fails():
    waited = observe(TOOK, hours(10, bad={6: Worst(0, 2700.0, 120)}), AT + 9 * H)
    assert waited["state"] == "failed" and "2700.0 s" in waited["reasons"][0]
    dead = observe(TOOK, hours(10, bad={2: Worst(3, 0.1, 120)}), AT + 9 * H)
    assert dead["state"] == "failed" and "dead-letter backlog reached 3" in dead["reasons"][0]
    unwatched = observe(TOOK, hours(10, skip=frozenset({4, 5})), AT + 9 * H)
    assert unwatched["state"] == "failed" and unwatched["reasons"][0].startswith("2 hour(s) without a health reading")


def test_the_hour_still_running_needs_no_reading_yet():
    assert observe(TOOK, hours(2), AT + 3 * H - timedelta(minutes=30))["state"] == "watching"
