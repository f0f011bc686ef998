"""Where the words live: the request table's statements and status words belong to the store
(``store.requests``), as the queue's belong to ``store.queue`` and its siblings, and the two "not configured"
messages (Kafka, Redis) are named apart. US-08 (request tracking) and OPS-2 (an operator is told
which missing setting stops which step)."""

from __future__ import annotations

import re
from pathlib import Path

from msgx_engine.delivery import projection, runner
from msgx_engine.handlers.answers import ANSWERABLE
from msgx_engine.requests import tracker
from msgx_engine.store.requests import OPEN, OUTCOMES, RequestStatus

STATUS_WORD = re.compile("[\"'](?:" + "|".join(RequestStatus) + ")[\"']")


def test_the_tracker_keeps_the_logic_and_the_store_the_statements() -> None:
    """US-08: tracker.py builds no SQL and spells no status word; the store names every status in
    one set, and the answer rule's statuses are among them."""
    source = Path(tracker.__file__).read_text(encoding="utf-8")
    assert not re.search(r"\b(?:select|update|insert|text)\(", source), "a statement left in the tracker"
    assert "req_track.c" not in source and "store.tables" not in source
    assert STATUS_WORD.findall(source) == []
    assert set(OPEN) | set(OUTCOMES) < set(RequestStatus)
    assert set(ANSWERABLE) <= set(RequestStatus)


def test_the_kafka_and_redis_not_configured_messages_are_named_apart() -> None:
    """OPS-2: each message names the setting that is missing and what stays undone."""
    assert not hasattr(runner, "NOT_CONFIGURED")
    assert "MSGX_KAFKA_BOOTSTRAP" in runner.KAFKA_NOT_CONFIGURED and "outbox" in runner.KAFKA_NOT_CONFIGURED
    assert "MSGX_REDIS_URL" in projection.REDIS_NOT_CONFIGURED
    assert runner.KAFKA_NOT_CONFIGURED != projection.REDIS_NOT_CONFIGURED
