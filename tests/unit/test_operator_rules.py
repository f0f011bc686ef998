"""The operator rules as pure functions: what may be replayed or skipped (US-10 AC2, D24), and
the duration syntax of MSGX_ARCHIVE_AFTER / --older-than / --since."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from msgx_engine.config import ConfigError, parse_duration
from msgx_engine.operations.replay import refusal
from msgx_engine.operations.skip import skip_refusal
from msgx_engine.store.queue_selection import QueueRow, Selection
from msgx_engine.store.status import Status

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def row(status: str, reason: str | None = None, error_class: str | None = None, applied: bool = False) -> QueueRow:
    return QueueRow(1, Status(status), reason, error_class, None, 5, T0, None, T0 if applied else None,
                    None, None, "FLOP", "GTDT")


@pytest.mark.parametrize("status,reason,error_class,routable,expected", [
    ("DEAD", "exhausted", "INFRA", True, None),
    ("DEAD", "exhausted", "CODEC_ERROR", True, None),
    ("DEAD", "exhausted", "HANDLER_ERROR", True, None),
    ("DEAD", "missing", None, None, None),
    ("FAILED", None, "INFRA", True, None),
    ("SKIPPED", "unsupported", None, True, None),
    ("SKIPPED", "unsupported", None, False, "refused: unsupported (this version still has no handler for it)"),
    ("DEAD", "malformed", "MALFORMED", None, "refused: malformed"),
    ("DEAD", "oversize", "MALFORMED", None, "refused: oversize"),
    ("DEAD", "forbidden", "MALFORMED", None, "refused: forbidden"),
    ("SKIPPED", "duplicate", None, True, "refused: SKIPPED(duplicate) is not replayable"),
    ("SKIPPED", "identity_conflict", None, True, "refused: SKIPPED(identity_conflict) is not replayable"),
    ("SUCCEEDED", None, None, True, "refused: SUCCEEDED is not replayable"),
    ("PENDING", None, None, True, "refused: PENDING is not replayable"),
])
def test_replay_refusal_rules(status, reason, error_class, routable, expected):
    """US-10 AC2: exhausted retries (INFRA, CODEC_ERROR, handler defects), FAILED, a vanished row and
    an unsupported type this version now handles may be replayed; malformed and the rest are
    refused with their reason."""
    assert refusal(row(status, reason, error_class), routable) == expected


def test_skip_only_open_unapplied_messages():
    """D24: only an open message whose state was not applied may be skipped."""
    assert skip_refusal(row("FAILED", None, "INFRA")) is None
    assert skip_refusal(row("PENDING")) is None
    assert skip_refusal(row("SUCCEEDED")) == "refused: already SUCCEEDED"
    assert skip_refusal(row("DEAD", "malformed")) == "refused: already DEAD(malformed)"
    assert skip_refusal(row("FAILED", None, "INFRA", applied=True)).startswith("refused: its state is applied")
    assert skip_refusal(None) == "refused: no such registered message"


def test_a_selection_is_never_everything():
    """US-10 AC4: no replayAll: an empty selection is refused before any query."""
    assert Selection().empty
    assert not Selection(ids=(1,)).empty and not Selection(statuses=("DEAD",)).empty
    assert not Selection(since=T0).empty


@pytest.mark.parametrize("text,seconds", [("0s", 0), ("30s", 30), ("90m", 5400), ("24h", 86400), ("2d", 172800),
                                          (" 7D ", 604800)])
def test_durations(text, seconds):
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "d", "2", "1.5d", "-1d", "2w", "1d2h"])
def test_bad_durations_are_refused(text):
    with pytest.raises(ConfigError):
        parse_duration(text, name="MSGX_ARCHIVE_AFTER")
