"""The health checks (OPS-2) as pure functions of one figures snapshot: backlog age, dead letters,
delivery backlog, backfill lag, projection drift, unsupported types, request timeouts, pipeline
liveness and the stand mapping. Each passes on a healthy snapshot and fails just past its limit."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from msgx_engine.monitor.checks import (
    CHECKS,
    MAX_BACKFILL_AGE_S,
    MAX_HEAD_AGE_S,
    MAX_UNSENT_AGE_S,
    Drift,
    evaluate,
)
from msgx_engine.monitor.figures import Figures, MailboxSide
from msgx_engine.store.bridges import MappingStatus
from msgx_engine.store.monitoring import Heartbeat
from msgx_engine.store.overview import DeadLetter

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


HEALTHY = Figures(now=NOW, open_messages=1, head_id=7, oldest_open_at=ago(3), by_status_reason=[("SUCCEEDED", None, 9)],
                  dead=0, backfill_pending=1, oldest_backfill_at=ago(2), unsent_by_topic={"msg": 2},
                  oldest_unsent_at=ago(1), dead_events=0, requests=[("RQFD", "DONE", 1)],
                  request_outcomes=[("RQFD", "NONE", "DONE", 4)], unsupported_recent=[], pump_lock_held=True,
                  heartbeats=[Heartbeat("pump", 1, "h", ago(600), ago(5))],
                  mailbox=MailboxSide(True, 3, ago(1)), stand_mapping=MappingStatus(True, 0))


def by_name(f: Figures, drift: Drift | None = None) -> dict:
    return {r.name: r for r in evaluate(f, drift)}


def test_the_checks_pass_on_a_healthy_snapshot():
    """OPS-2: the named checks exist, in a fixed order, and a healthy state passes them all."""
    assert list(CHECKS) == ["backlog_age", "dead_letters", "delivery_backlog", "backfill_lag", "projection_drift",
                            "unsupported_types", "request_timeouts", "pipeline_liveness", "stand_mapping"]
    results = by_name(HEALTHY, Drift(total=0))
    assert all(r.passed for r in results.values()), [r.summary for r in results.values() if not r.passed]


@pytest.mark.parametrize(("name", "change"), [
    ("backlog_age", {"oldest_open_at": ago(MAX_HEAD_AGE_S + 1)}),
    ("dead_letters", {"dead": 1}),
    ("delivery_backlog", {"oldest_unsent_at": ago(MAX_UNSENT_AGE_S + 1)}),
    ("delivery_backlog", {"dead_events": 1}),
    ("backfill_lag", {"oldest_backfill_at": ago(MAX_BACKFILL_AGE_S + 1)}),
    ("unsupported_types", {"unsupported_recent": [("ZZZZ-XXXX", 2)]}),
    ("request_timeouts", {"request_outcomes": [("RQFD", "NONE", "TIMEOUT", 5), ("RQRD", "ABDG", "DONE", 6)]}),
    ("pipeline_liveness", {"pump_lock_held": False, "heartbeats": [], "mailbox": MailboxSide(True, 5, ago(90))}),
    ("stand_mapping", {"stand_mapping": MappingStatus(False, 2)}),
    ("stand_mapping", {"stand_mapping": MappingStatus(True, 1)}),
])
def test_each_check_fails_past_its_limit_and_only_it(name, change):
    """OPS-2: each check turns failing on its own condition, with a summary that names the figure."""
    results = by_name(replace(HEALTHY, **change), Drift(total=0))
    failing = [r.name for r in results.values() if not r.passed]
    assert failing == [name]
    assert results[name].summary


def test_unsupported_and_timeouts_name_what_they_saw():
    """The alert text tells the operator which types / which request kinds."""
    r = by_name(replace(HEALTHY, unsupported_recent=[("ZZZZ-XXXX", 2)],
                        request_outcomes=[("RQFD", "NONE", "TIMEOUT", 5)]))
    assert "ZZZZ-XXXX ×2" in r["unsupported_types"].summary and r["unsupported_types"].value == 2
    assert "RQFD/NONE #5" in r["request_timeouts"].summary


def test_projection_drift_fails_on_drift_or_an_unreadable_redis_and_passes_unconfigured():
    """D10/INV-24: drift > 0 fails; Redis unreadable fails (drift cannot be ruled out); no Redis passes."""
    assert not by_name(HEALTHY, Drift(total=3))["projection_drift"].passed
    assert by_name(HEALTHY, Drift(total=3))["projection_drift"].value == 3
    unreadable = by_name(HEALTHY, Drift(total=0, error="ConnectionError: refused"))["projection_drift"]
    assert not unreadable.passed and "not measured" in unreadable.summary
    unconfigured = by_name(HEALTHY, None)["projection_drift"]
    assert unconfigured.passed and unconfigured.metadata == {"configured": False}


def test_an_empty_queue_has_no_age():
    """Nothing open, nothing to mark, nothing to send: ages are 0, not an error."""
    empty = replace(HEALTHY, open_messages=0, head_id=None, oldest_open_at=None, backfill_pending=0,
                    oldest_backfill_at=None, unsent_by_topic={}, oldest_unsent_at=None)
    assert (empty.head_age_s, empty.backfill_age_s, empty.unsent_age_s) == (0.0, 0.0, 0.0)
    assert all(r.passed for r in evaluate(empty, None))


def test_a_dead_letters_cause_names_each_flight_whole():
    """OPS-2: the dead-letter cause cuts a long error between words, so a FLID in it is shown whole
    or not at all: the demo's refused cancellation was shown as "flight 2612070;", another flight."""
    error = ("INFRA ProgrammingError: (psycopg.errors.InsufficientPrivilege) demo fault: the state database "
             "refuses to cancel flight 2612050186 (CZ3424); the fix: msgx demo --fix-fault")
    letter = DeadLetter(155, "FLOP", "CNCL", "exhausted", "INFRA", error, NOW, NOW)
    r = by_name(replace(HEALTHY, dead=1, dead_letters=(letter,)))["dead_letters"]
    flights = re.findall(r"flight (\d+)", r.summary)
    assert all(f == "2612050186" for f in flights), r.summary
    assert "155 FLOP/CNCL exhausted" in r.summary
