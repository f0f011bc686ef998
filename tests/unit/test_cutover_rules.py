"""The cut-over's pure decisions (OPS-4, PRE-1, OPS-3): where the watermark lies, which state of
the two installations each command refuses, and what a pump does with the cut-over's record."""

from __future__ import annotations

from msgx_engine.cutover import rules
from msgx_engine.store.cutover_state import (
    PRODUCTION,
    ROLLING_BACK,
    SHADOW,
    STOPPED,
    CutoverState,
    delivery_refusal,
    refusal,
)

ACTIVE = CutoverState(PRODUCTION)
STOPPED_AT_100 = CutoverState(PRODUCTION, STOPPED, 100, audit_id=7)


def test_the_watermark_is_just_below_the_queue_head_or_everything_accounted_for():
    """OPS-4: messages finish in id order, so the highest finished id is the head's predecessor."""
    assert rules.finished_high_water(101, 250) == 100
    assert rules.finished_high_water(None, 250) == 250
    assert rules.finished_high_water(1, 0) == 0


def test_stop_writes_runs_only_where_the_right_is_held():
    """PRE-1: a shadow, a shadow's database and a stopped installation hold no right to give up."""
    assert rules.stop_refusal(shadow_mode=False, state=None) is None
    assert rules.stop_refusal(shadow_mode=False, state=ACTIVE) is None
    assert "is a shadow" in (rules.stop_refusal(shadow_mode=True, state=None) or "")
    assert "shadow installation" in (rules.stop_refusal(shadow_mode=False, state=CutoverState(SHADOW)) or "")
    assert "already stopped" in (rules.stop_refusal(shadow_mode=False, state=STOPPED_AT_100) or "")


def test_stop_writes_hands_over_only_what_is_finished_marked_and_delivered():
    """OPS-4: an applied message not finished, finished rows above an open one, owed marks and
    undelivered events each keep the installation from stopping, each with its own reason."""
    clean = dict(watermark=100, applied_open=None, finished_above=0, pending_marks=0, waiting_events=0, kafka=True)
    assert rules.stop_problems(**clean) == []
    found = rules.stop_problems(**{**clean, "applied_open": 101, "finished_above": 3, "pending_marks": 2,
                                   "waiting_events": 5, "kafka": False})
    assert len(found) == 4
    assert "101" in found[0] and "3 message(s) above mailbox id 100" in found[1]
    assert "2 processed mailbox row(s)" in found[2] and "Kafka is not configured" in found[3]


def test_promote_needs_a_shadows_database_production_settings_and_a_stopped_old_installation():
    """OPS-3, PRE-1: promote refuses shadow settings, a production database (by record or by its
    history), an old installation that has not stopped, and a candidate behind the watermark."""
    ok = dict(shadow_mode=False, own=None, own_history=None, old=STOPPED_AT_100)
    assert rules.promote_refusal(**ok) is None
    assert rules.promote_refusal(**{**ok, "own": CutoverState(SHADOW)}) is None
    assert "configuration" in (rules.promote_refusal(**{**ok, "shadow_mode": True}) or "")
    assert "already a production" in (rules.promote_refusal(**{**ok, "own": ACTIVE}) or "")
    assert "marks" in (rules.promote_refusal(**{**ok, "own_history": "it has written marks"}) or "")
    for old in (None, ACTIVE, CutoverState(PRODUCTION, STOPPED, None)):
        assert "has not stopped writes" in (rules.promote_refusal(**{**ok, "old": old}) or "")
    assert rules.behind_refusal(100, 100) is None and rules.behind_refusal(120, 100) is None
    assert "up to id 99, behind" in (rules.behind_refusal(99, 100) or "")


def test_rollback_needs_this_installation_stopped_and_the_promoted_one_stopped_after_taking_over_here():
    """OPS-4, PRE-1: at no moment two holders: the promoted installation must have stopped, and it
    must be the one that took over at this installation's watermark."""
    promoted_stopped = CutoverState(PRODUCTION, STOPPED, 180, took_over_at=100)
    assert rules.rollback_refusal(shadow_mode=False, own=STOPPED_AT_100, other=promoted_stopped) is None
    assert "not stopped writes" in (rules.rollback_refusal(shadow_mode=False, own=ACTIVE, other=promoted_stopped)
                                    or "")
    running = CutoverState(PRODUCTION, took_over_at=100)
    assert "promoted installation has not stopped" in (
        rules.rollback_refusal(shadow_mode=False, own=STOPPED_AT_100, other=running) or "")
    elsewhere = CutoverState(PRODUCTION, STOPPED, 180, took_over_at=90)
    assert "at mailbox id 90" in (rules.rollback_refusal(shadow_mode=False, own=STOPPED_AT_100, other=elsewhere) or "")
    assert "records no promote" in (rules.rollback_refusal(shadow_mode=False, own=STOPPED_AT_100, other=None) or "")


def test_a_pump_refuses_a_stopped_installation_and_a_shadow_on_a_promoted_database():
    """PRE-1: the record keeps a relaunched pump stopped; OPS-3: a shadow never runs on a database a
    promote made production's; an untouched database runs as its mode says."""
    assert refusal(None, shadow=False) is None and refusal(None, shadow=True) is None
    assert refusal(ACTIVE, shadow=False) is None
    assert "at mailbox id 100" in (refusal(STOPPED_AT_100, shadow=False) or "")
    assert "became a production" in (refusal(ACTIVE, shadow=True) or "")


ROLLING_BACK_AT_100 = CutoverState(PRODUCTION, ROLLING_BACK, 100, audit_id=9)


def test_a_rollback_in_progress_stops_pumps_dispatchers_and_every_other_command():
    """OPS-4, PRE-1: while a rollback is in progress only the same rollback may run: the pump and the
    dispatcher refuse, stop-writes, promote from it and resume are refused naming the rollback."""
    assert ROLLING_BACK_AT_100.stopped
    assert "rollback to this installation is in progress" in (refusal(ROLLING_BACK_AT_100, shadow=False) or "")
    assert "in progress" in (delivery_refusal(ROLLING_BACK_AT_100) or "")
    assert "in progress" in (rules.stop_refusal(shadow_mode=False, state=ROLLING_BACK_AT_100) or "")
    ok = dict(shadow_mode=False, own=None, own_history=None)
    assert "middle of a rollback" in (rules.promote_refusal(**ok, old=ROLLING_BACK_AT_100) or "")
    assert "in progress" in (rules.resume_refusal(shadow_mode=False, own=ROLLING_BACK_AT_100) or "")
    promoted_stopped = CutoverState(PRODUCTION, STOPPED, 180, took_over_at=100)
    assert rules.rollback_refusal(shadow_mode=False, own=ROLLING_BACK_AT_100, other=promoted_stopped) is None


def test_a_dispatcher_publishes_unless_the_installation_gave_the_right_up():
    """PRE-1, OPS-4: stopped at a watermark: nothing is published; while stop-writes drains (stopped,
    no watermark yet) the installation still holds the right and delivers what it owes."""
    assert delivery_refusal(None) is None and delivery_refusal(ACTIVE) is None
    assert delivery_refusal(CutoverState(SHADOW)) is None
    assert "at mailbox id 100" in (delivery_refusal(STOPPED_AT_100) or "")
    assert delivery_refusal(CutoverState(PRODUCTION, STOPPED, None)) is None


def test_a_production_pump_refuses_a_shadows_database():
    """OPS-3: the role a shadow recorded keeps a production-mode pump off its database until promote."""
    why = refusal(CutoverState(SHADOW), shadow=False) or ""
    assert "is a shadow's" in why and "msgx cutover promote" in why and "MSGX_MODE=shadow" in why
    assert refusal(CutoverState(SHADOW), shadow=True) is None


def test_resume_only_on_a_stopped_installation_nobody_took_over_from():
    """OPS-4, PRE-1: resume needs this installation stopped (a stop that never recorded its watermark
    too); marks after the watermark mean a promoted installation processed rows: rollback instead."""
    assert rules.resume_refusal(shadow_mode=False, own=STOPPED_AT_100) is None
    assert rules.resume_refusal(shadow_mode=False, own=CutoverState(PRODUCTION, STOPPED, None)) is None
    assert "shadow" in (rules.resume_refusal(shadow_mode=True, own=STOPPED_AT_100) or "")
    for own in (None, ACTIVE, CutoverState(SHADOW)):
        assert "not stopped writes" in (rules.resume_refusal(shadow_mode=False, own=own) or "")
    assert rules.taken_over_refusal(100, 0, None, None) is None
    why = rules.taken_over_refusal(100, 3, 101, 130) or ""
    assert "ids 101 to 130" in why and "msgx cutover rollback" in why


def test_dead_events_stop_the_hand_over_until_their_number_is_accepted():
    """OPS-4: dead events and those held behind them are lost to both installations after the
    hand-over: refused unless --accept-dead names exactly their number."""
    clean = dict(watermark=100, applied_open=None, finished_above=0, pending_marks=0, waiting_events=0, kafka=True)
    [why] = rules.stop_problems(**clean, dead_events=2, held_events=3)
    assert "5 event(s)" in why and "2 dead" in why and "--accept-dead 5" in why
    [why] = rules.stop_problems(**clean, dead_events=2, held_events=3, accepted_dead=4)
    assert "the number is now 5" in why
    assert rules.stop_problems(**clean, dead_events=2, held_events=3, accepted_dead=5) == []
