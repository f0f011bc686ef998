"""What may be acknowledged, and how the outbox overview reads, as pure functions (OPS-2)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from msgx_engine.operations.acknowledge import refusal
from msgx_engine.operations.outbox_ops import OutboxPreview, excerpt
from msgx_engine.store.outbox import DeadEvent
from msgx_engine.store.queue_selection import QueueRow
from msgx_engine.store.status import Status

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def row(status: str, reason: str | None = None, acknowledged_by: str | None = None) -> QueueRow:
    return QueueRow(1, Status(status), reason, None, None, 5, T0, None, None, None, None, "FLOP", "GTDT",
                    T0 if acknowledged_by else None, acknowledged_by)


@pytest.mark.parametrize("status,reason,expected", [
    ("DEAD", "malformed", None),
    ("DEAD", "oversize", None),
    ("SKIPPED", "unsupported", None),
    ("SKIPPED", "duplicate", "refused: SKIPPED(duplicate) does not wait for an operator"),
    ("SUCCEEDED", None, "refused: SUCCEEDED does not wait for an operator"),
    ("PENDING", None, "refused: PENDING is still being processed"),
    ("FAILED", None, "refused: FAILED is still being processed"),
])
def test_only_dead_and_unsupported_messages_wait_for_an_operator(status, reason, expected):
    """OPS-2: acknowledging closes what waits for an operator: DEAD (any reason) and
    SKIPPED(unsupported); anything else is refused with the reason in the operator's words."""
    got = refusal(row(status, reason))
    assert (got is None) == (expected is None)
    if expected:
        assert got is not None and got.startswith(expected)
    assert row(status, reason).waits_for_operator == (expected is None)


@pytest.mark.parametrize("reason", ["exhausted", "missing"])
def test_a_replayable_dead_letter_is_refused_unless_the_operator_insists(reason):
    """OPS-2, US-10 AC2: a dead letter a replay fixes once its cause is gone waits for an operator,
    but acknowledging it would drop its effect for good: refused, naming the replay preview and
    --even-if-replayable; with that flag it may be closed."""
    dead = row("DEAD", reason)
    assert dead.waits_for_operator and dead.replayable_dead
    got = refusal(dead) or ""
    assert got.startswith(f"refused: DEAD({reason}) is replayable once its cause is fixed")
    assert "msgx replay --ids 1" in got and "--even-if-replayable" in got
    assert refusal(dead, even_if_replayable=True) is None
    assert not row("DEAD", "malformed").replayable_dead


def test_unknown_and_already_acknowledged_are_refused():
    """OPS-2: an unknown id and an acknowledged message are refused, naming who acknowledged it."""
    assert refusal(None) == "refused: no such message (not registered, or already archived)"
    acked = row("DEAD", "malformed", acknowledged_by="alice")
    assert not acked.waits_for_operator
    assert (refusal(acked) or "").startswith("refused: already acknowledged by alice at 2026-01-01 00:00:00")


def test_outbox_overview_names_each_dead_event_and_the_command():
    """OPS-2: per topic counts, the oldest age, each dead event with its error excerpt on one line
    (newlines folded, cut), how many wait behind it, and the --apply command with its ids."""
    dead = DeadEvent(42, "msg", "CA101-X", 7, "change", 30, "KafkaError\n" + "x" * 500, T0, T0, 3)
    view = OutboxPreview(T0 + timedelta(minutes=5), {"msg": 4}, T0, (dead,), 1)
    text = "\n".join(view.lines())
    assert [line.split() for line in text.splitlines()[1:3]] == [["msg", "4"], ["schd", "0"]]
    assert "oldest undelivered event released 5m ago" in text
    assert ("event 42: topic msg, flight CA101-X, mailbox id 7, 30 attempt(s), dead since 2026-01-01 "
            "00:00:00+0000, 3 later event(s) of this flight wait behind it") in text
    assert "  last error: KafkaError xxx" in text and text.count("x" * 200) == 0
    assert "msgx outbox --apply --ids 42 --operator NAME --reason TEXT" in text
    assert excerpt(None) == "-" and len(excerpt("y" * 1000)) == 163
