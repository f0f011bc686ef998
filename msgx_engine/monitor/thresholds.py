"""The health checks' limits and cadences, in one table, in seconds.

Each number is written here once. The checks compare against it, and the text an operator reads
about it (the Dagster check descriptions, the health sensor's description, the checks' own
summaries) is made from it with ``Threshold.words``, so the prose cannot drift from the rule.
docs/runbook.md and the Prometheus rules state some of these numbers in their own sentences;
unit tests hold those to the values here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from msgx_engine.config import spoken  # re-exported: the checks' texts say durations with it


@dataclass(frozen=True)
class Threshold:
    """One named limit or cadence, in seconds, with what it means."""

    name: str
    seconds: float
    meaning: str

    @property
    def words(self) -> str:
        """The duration as a sentence says it: "30 seconds", "2 minutes", "1 hour"."""
        return spoken(self.seconds)


HEAD_AGE: Final = Threshold(
    "head_age", 600.0, "the oldest open message has waited this long: the queue is stuck behind it")
UNSENT_AGE: Final = Threshold(
    "unsent_age", 120.0, "a released event has waited this long for Kafka: Kafka is down or slow")
BACKFILL_AGE: Final = Threshold(
    "backfill_age", 300.0, "a mailbox processed-mark is still unwritten after this long: the mailbox refuses it")
HEARTBEAT_LIMIT: Final = Threshold(
    "heartbeat_limit", 60.0, "a looping pump beats every 10-15 s; this much silence means it is gone or hung")
WORK_GRACE: Final = Threshold(
    "work_grace", 60.0, "work younger than this may simply be waiting for a pump that is starting")
START_FAILURE_WINDOW: Final = Threshold(
    "start_failure_window", 1800.0, "a pump that stopped before processing this recently is named as failing "
    "at its start")
UNSUPPORTED_WINDOW: Final = Threshold(
    "unsupported_window", 3600.0, "a message of an unsupported type seen this recently keeps its check failing")
HEALTH_INTERVAL: Final = Threshold(
    "health_interval", 30.0, "how often the health sensor evaluates every check")
HEALTH_REFRESH: Final = Threshold(
    "health_refresh", 300.0, "a passing, unchanged result is recorded in Dagster again at least this often")

THRESHOLDS: Final[dict[str, Threshold]] = {t.name: t for t in (
    HEAD_AGE, UNSENT_AGE, BACKFILL_AGE, HEARTBEAT_LIMIT, WORK_GRACE, START_FAILURE_WINDOW, UNSUPPORTED_WINDOW,
    HEALTH_INTERVAL, HEALTH_REFRESH)}
