"""The queue head's retry policy (US-03 AC4/AC5): pure functions of attempts and time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from msgx_engine.pipeline.policy import RetryPolicy


def test_retry_policy_is_pure_and_capped():
    """US-03 AC4: 1, 2, 4, 8, 16 s, capped at 60 s; exhausted at 5 attempts or past the deadline."""
    p = RetryPolicy()
    assert [p.delay(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    assert not p.exhausted(4, t0, t0 + timedelta(seconds=599))
    assert p.exhausted(5, t0, t0)
    assert p.exhausted(2, t0, t0 + timedelta(seconds=600)) and not p.exhausted(1, t0, t0 + timedelta(seconds=900))


def test_d22_waits_double_from_the_start_of_the_wait_capped_at_30_s():
    """D22: a head waiting for the projection looks again after 1, 1, 2, 4, 8, 16, 30, 30 s ...;
    the alert threshold is 60 s. No attempt count is involved (never exhausted by waiting)."""
    p = RetryPolicy()
    waited, delays = 0.0, []
    for _ in range(9):
        delays.append(p.wait_delay(waited))
        waited += delays[-1]
    assert delays == [1, 1, 2, 4, 8, 16, 30, 30, 30]
    assert (p.wait_cap_s, p.wait_alert_s) == (30.0, 60.0)
