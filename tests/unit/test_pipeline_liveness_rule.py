"""The pipeline liveness rule, the dead-letter detail, the operator wording of every check and the
re-alerting tally, as pure functions of a figures snapshot (OPS-2): each stall cause is told apart
and named in words, a pump that is starting or between two runs is not flagged, and a failing
count re-alerts only when it rises."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from msgx_engine.monitor.alerts import next_tally, rise_text
from msgx_engine.monitor.checks import (
    HEARTBEAT_LIMIT_S,
    WORK_GRACE_S,
    Drift,
    Rising,
    ago,
    dead_letters,
    evaluate,
    liveness,
    pipeline_liveness,
    stand_mapping,
)
from msgx_engine.monitor.figures import Figures, MailboxSide
from msgx_engine.store.bridges import MappingStatus
from msgx_engine.store.monitoring import Heartbeat, Tally
from msgx_engine.store.overview import DeadLetter

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def at(seconds_ago: float) -> datetime:
    return NOW - timedelta(seconds=seconds_ago)


def beat(started_ago: float, beat_ago: float) -> list[Heartbeat]:
    return [Heartbeat("pump", 4242, "host-a", at(started_ago), at(beat_ago))]


QUIET = Figures(now=NOW, open_messages=0, head_id=None, oldest_open_at=None, by_status_reason=[], dead=0,
                backfill_pending=0, oldest_backfill_at=None, unsent_by_topic={}, oldest_unsent_at=None,
                dead_events=0, requests=[], request_outcomes=[], unsupported_recent=[], pump_lock_held=False,
                heartbeats=beat(3600, 3000), mailbox=MailboxSide(True), stand_mapping=MappingStatus(True, 0))
ROWS_WAIT = replace(QUIET, mailbox=MailboxSide(True, 50, at(95)))


def test_rows_waiting_with_no_pump_ever_run_stall():
    """Sensor stopped or daemon down on a new installation: 50 rows wait 95 s, no heartbeat at all."""
    r = pipeline_liveness(replace(ROWS_WAIT, heartbeats=[]), None)
    assert not r.passed and not r.warn_only
    assert "50 mailbox row(s) wait to be registered, the oldest 95 s" in r.summary
    assert "no pump has ever run" in r.summary and "`msgx status`" in r.summary
    assert r.metadata["unregistered_rows"] == 50 and r.metadata["pump_alive"] is False


def test_a_pump_holding_the_lock_and_beating_is_alive():
    r = pipeline_liveness(replace(ROWS_WAIT, pump_lock_held=True, heartbeats=beat(600, 5)), None)
    assert r.passed and "a pump is running" in r.summary


def test_a_pump_gone_for_longer_than_the_heartbeat_limit_stalls_and_says_when():
    """Killed and not relaunched (or the daemon down after it ran): the lock is free, the last
    heartbeat 14 min old."""
    r = pipeline_liveness(replace(ROWS_WAIT, heartbeats=beat(7200, 14 * 60)), None)
    assert not r.passed and "no pump is running (last heartbeat 14 min ago)" in r.summary


def test_between_two_runs_a_pump_that_looped_recently_is_not_flagged():
    """One run exits, the sensor starts the next within seconds: a loop beat younger than the limit
    counts; the same silence past the limit does not."""
    assert pipeline_liveness(replace(ROWS_WAIT, heartbeats=beat(1800, 20)), None).passed
    assert not pipeline_liveness(replace(ROWS_WAIT, heartbeats=beat(1800, HEARTBEAT_LIMIT_S + 1)), None).passed


def test_runs_that_fail_as_they_start_stall_however_often_they_restart():
    """Each crashing run writes only its start beat (started == beat): never counted as alive."""
    r = pipeline_liveness(replace(ROWS_WAIT, heartbeats=beat(8, 8)), None)
    assert not r.passed and "stopped before it began processing" in r.summary


def test_a_pump_that_holds_the_lock_but_stopped_beating_hangs():
    r = pipeline_liveness(replace(ROWS_WAIT, pump_lock_held=True, heartbeats=beat(900, 300)), None)
    assert not r.passed and "holds the writer lock but has not beaten for 5 min: it hangs" in r.summary


def test_young_work_waits_for_a_pump_that_is_starting():
    """Grace: work younger than WORK_GRACE_S is not a stall yet, whatever the pump."""
    young = replace(QUIET, heartbeats=[], mailbox=MailboxSide(True, 3, at(WORK_GRACE_S - 10)))
    assert pipeline_liveness(young, None).passed
    assert not pipeline_liveness(replace(young, mailbox=MailboxSide(True, 3, at(WORK_GRACE_S + 1))), None).passed


@pytest.mark.parametrize("change", [
    {"open_messages": 2, "head_id": 7, "oldest_open_at": at(400)},
    {"backfill_pending": 4, "oldest_backfill_at": at(400)},
])
def test_open_messages_and_pending_marks_are_work_too(change):
    r = pipeline_liveness(replace(QUIET, heartbeats=beat(3600, 3000), **change), None)
    assert not r.passed and "no pump is running" in r.summary


def test_nothing_waiting_passes_without_a_pump():
    r = pipeline_liveness(replace(QUIET, heartbeats=[]), None)
    assert r.passed and "no work waits" in r.summary


def test_rows_without_an_insert_time_count_as_old():
    side = MailboxSide(True, 2, None, unstamped=True)
    live = liveness(replace(QUIET, mailbox=side))
    assert live.stalled and math.isinf(live.work_age_s)
    assert "of unknown age" in pipeline_liveness(replace(QUIET, mailbox=side), None).summary


def test_an_unreadable_mailbox_fails_and_says_so():
    f = replace(QUIET, pump_lock_held=True, heartbeats=beat(60, 3),
                mailbox=MailboxSide(False, error="OperationalError: connection refused"))
    r = pipeline_liveness(f, None)
    assert not r.passed and "the mailbox cannot be read (OperationalError: connection refused)" in r.summary
    assert r.metadata["mailbox_up"] is False
    assert not liveness(f).stalled      # the stall gauge says nothing about what it cannot see


def test_without_a_mailbox_only_postgresql_work_is_judged():
    r = pipeline_liveness(replace(QUIET, mailbox=None, heartbeats=[]), None)
    assert r.passed and "mailbox_up" not in r.metadata


def dead(i: int, detail: str | None = "decode: <FLID> is missing " + "x" * 300) -> DeadLetter:
    return DeadLetter(i, "FLOP", "GTDT", "malformed", None, detail, at(600), at(590))


def test_dead_letters_list_the_oldest_with_reasons_and_the_commands():
    f = replace(QUIET, dead=25, dead_letters=tuple(dead(100 + i) for i in range(20)),
                dead_ids=tuple(range(100, 125)))
    r = dead_letters(f, None)
    assert not r.passed and r.warn_only and r.value == 25
    assert "25 dead letter(s) wait for an operator; the 20 oldest: 100 FLOP/GTDT malformed: decode:" in r.summary
    assert "`msgx replay --status DEAD`" in r.summary and "`msgx acknowledge ID… --operator NAME --reason TEXT`" \
        in r.summary
    assert [row["mailbox_id"] for row in r.rows] == list(range(100, 120))
    assert all(len(str(row["error"])) <= 120 for row in r.rows)
    assert r.metadata["listed"] == 20 and r.metadata["oldest_ids"].startswith("100, 101")
    assert r.rising == Rising("dead letter(s)", "mailbox id", 25, tuple(range(100, 125)))


def test_stand_mapping_fails_only_when_a_flight_publishes_null_airbridges():
    assert stand_mapping(replace(QUIET, stand_mapping=MappingStatus(False, 0)), None).passed
    r = stand_mapping(replace(QUIET, stand_mapping=MappingStatus(False, 3)), None)
    assert not r.passed and "never loaded: 3 live flight(s)" in r.summary and "`msgx request rqrd ABDG`" in r.summary


FAILING_ALL = replace(
    QUIET, open_messages=2, head_id=7, oldest_open_at=at(900), dead=1, dead_letters=(dead(7),), dead_ids=(7,),
    backfill_pending=1, oldest_backfill_at=at(900), unsent_by_topic={"msg": 1}, oldest_unsent_at=at(900),
    dead_events=1, dead_event_ids=(5,), request_outcomes=[("RQFD", "NONE", "TIMEOUT", 5)],
    unsupported_recent=[("ZZZZ-XXXX", 1)], stand_mapping=MappingStatus(False, 1), mailbox=MailboxSide(True, 1, at(900)))
INTERNAL_ID = re.compile(r"\b(OPS|US|INV|AC|CLM|FS|[CDPMEF])-?\d+\b")


def test_every_failing_check_names_a_command_and_no_internal_id():
    """Operator text: each failing summary names the first command to run, in backquotes, and carries
    no requirement or decision id."""
    results = evaluate(FAILING_ALL, Drift(total=2))
    assert all(not r.passed for r in results), [r.name for r in results if r.passed]
    for r in results:
        assert re.search(r"`[^`]+`", r.summary), r.name
        assert not INTERNAL_ID.search(r.summary), (r.name, r.summary)


def test_ago_reads_as_an_operator_says_it():
    assert [ago(s) for s in (5, 95, 14 * 60, 3 * 3600 + 300, 3 * 86400)] == ["5 s", "95 s", "14 min", "3 h 5 min",
                                                                             "3 d"]


def test_a_count_rises_names_the_new_ids_and_stays_or_falls_silently():
    """Re-alerting: a rise is pending with the new ids; a count that stays or falls changes nothing
    pending; a rise after a fall is measured from the fall; an unposted rise accumulates."""
    rising = lambda n, ids: Rising("dead letter(s)", "mailbox id", n, tuple(ids))  # noqa: E731
    first = next_tally(rising(1, [900]), None)
    assert first == Tally(1, (900,))
    up = next_tally(rising(3, [900, 901, 902]), first)
    assert (up.pending, up.new, up.rose_from) == (True, (901, 902), 1)
    posted = Tally(up.count, up.ids)                       # what the webhook's acceptance leaves
    assert not next_tally(rising(3, [900, 901, 902]), posted).pending
    fell = next_tally(rising(2, [900, 902]), posted)
    assert not fell.pending and fell.count == 2
    again = next_tally(rising(3, [900, 902, 903]), fell)
    assert (again.new, again.rose_from) == ((903,), 2)
    more = next_tally(rising(4, [900, 902, 903, 904]), again)      # not posted yet: one pending rise
    assert (more.new, more.rose_from, more.count) == ((903, 904), 2, 4)
    r = dead_letters(replace(QUIET, dead=4, dead_letters=(dead(900),), dead_ids=more.ids), None)
    text = rise_text(r, more, mode="production")
    assert text.startswith("[msgx production] dead_letters FAILING, rising: dead letter(s) rose from 2 to 4; "
                           "new: mailbox id 903, 904.")
    assert Tally.from_json(more.to_json()) == more and Tally.from_json("not json") is None
