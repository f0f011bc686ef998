"""Retry policy of the queue head (US-03 AC4/AC5): pure functions of attempts and time."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 5
    base_delay_s: float = 1.0
    max_delay_s: float = 60.0
    head_deadline_s: float = 600.0
    # docs/decisions.md P2, deadline of an old head: a message that reaches the head already older than the deadline (a
    # backlog) still gets this many attempts, so one transient error does not dead-letter it.
    min_attempts: int = 2
    # D22, projection failure; D24, vanished mailbox row: a head that waits for something outside the message (the
    # projection, an operator) retries with this cap and uses no attempt; an alert once it has waited ``wait_alert_s``.
    wait_cap_s: float = 30.0
    wait_alert_s: float = 60.0

    def delay(self, attempts: int) -> float:
        """Backoff after the n-th failed attempt: 1, 2, 4, 8, 16 s ... capped at 60 s."""
        return min(self.base_delay_s * (2 ** max(attempts - 1, 0)), self.max_delay_s)

    def exhausted(self, attempts: int, created_at: datetime, now: datetime) -> bool:
        """At most ``max_attempts``; past the head deadline (from the stable ``created_at``,
        US-03 AC5) once ``min_attempts`` have been made."""
        if attempts >= self.max_attempts:
            return True
        return attempts >= self.min_attempts and now - created_at >= timedelta(seconds=self.head_deadline_s)

    def wait_delay(self, waited_s: float) -> float:
        """Backoff of a waiting head after ``waited_s`` of waiting: 1, 1, 2, 4, 8, 16, 30, 30 s ...
        (doubling from the start of the wait, capped at ``wait_cap_s``; D22, projection failure)."""
        return min(self.wait_cap_s, max(self.base_delay_s, waited_s))

    def next_attempt_at(self, attempts: int, now: datetime) -> datetime:
        return now + timedelta(seconds=self.delay(attempts))
