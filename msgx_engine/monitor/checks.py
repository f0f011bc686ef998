"""The health checks (OPS-2), as pure functions of the monitor's figures.

One definition serves three readers: the Dagster asset checks (clicked in the UI), the scheduled
``monitor_job`` that evaluates them every minute and alerts on state changes, and the docs. Each
check says what "healthy" means in one sentence and returns its headline figure, so the alert
text and the check's metadata read the same numbers.

Projection drift needs Redis and a full comparison, so it is not a figure: the caller measures it
(``App.projection_drift``) and hands in the result, or None when no Redis is configured.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from msgx_engine.monitor.figures import UNSUPPORTED_WINDOW, Figures

Scalar = str | int | float | bool
MAX_HEAD_AGE_S = 600.0        # the head deadline (DESIGN §2): older means the queue is stuck
MAX_UNSENT_AGE_S = 120.0      # a released event undelivered this long: Kafka is down or slow
MAX_BACKFILL_AGE_S = 300.0    # a mailbox mark still unwritten after 5 minutes: the mailbox refuses it


@dataclass(frozen=True)
class Drift:
    """What the projection comparison found (the caller's measurement, see module doc)."""

    total: int
    metadata: Mapping[str, Scalar] = field(default_factory=dict)
    error: str | None = None        # Redis could not be read: drift cannot be ruled out


@dataclass(frozen=True)
class CheckResult:
    name: str
    passed: bool
    summary: str                          # one line: the alert text and the UI's description
    value: float | None = None            # the headline figure (stored, exported as a metric)
    metadata: Mapping[str, Scalar] = field(default_factory=dict)
    warn_only: bool = False               # severity WARN in Dagster (an operator's to-do, not an outage)


def backlog_age(f: Figures, drift: Drift | None) -> CheckResult:
    age = round(f.head_age_s, 1)
    return CheckResult("backlog_age", age < MAX_HEAD_AGE_S,
                       f"oldest open message {f.head_id} registered {age:.0f} s ago (limit {MAX_HEAD_AGE_S:.0f} s), "
                       f"{f.open_messages} open", age,
                       {"oldest_open_age_s": age, "open": f.open_messages, "head_id": f.head_id or 0})


def dead_letters(f: Figures, drift: Drift | None) -> CheckResult:
    return CheckResult("dead_letters", f.dead == 0, f"{f.dead} dead letter(s) wait for an operator (msgx replay)",
                       float(f.dead), {"dead": f.dead}, warn_only=True)


def delivery_backlog(f: Figures, drift: Drift | None) -> CheckResult:
    age = round(f.unsent_age_s, 1)
    ok = f.dead_events == 0 and age < MAX_UNSENT_AGE_S
    return CheckResult("delivery_backlog", ok,
                       f"{f.unsent_events} undelivered event(s), oldest released {age:.0f} s ago "
                       f"(limit {MAX_UNSENT_AGE_S:.0f} s), {f.dead_events} dead event(s)", age,
                       {"unsent_released_events": f.unsent_events, "oldest_unsent_age_s": age,
                        "dead_events": f.dead_events}, warn_only=True)


def backfill_lag(f: Figures, drift: Drift | None) -> CheckResult:
    age = round(f.backfill_age_s, 1)
    return CheckResult("backfill_lag", age < MAX_BACKFILL_AGE_S,
                       f"{f.backfill_pending} mailbox mark(s) to write, oldest queued {age:.0f} s ago "
                       f"(limit {MAX_BACKFILL_AGE_S:.0f} s)", age,
                       {"backfill_pending": f.backfill_pending, "oldest_backfill_age_s": age})


def projection_drift(f: Figures, drift: Drift | None) -> CheckResult:
    if drift is None:
        return CheckResult("projection_drift", True, "no Redis projection configured", None, {"configured": False})
    if drift.error is not None:
        return CheckResult("projection_drift", False, f"projection drift not measured: {drift.error}", None,
                           {"configured": True, "error": drift.error})
    return CheckResult("projection_drift", drift.total == 0,
                       f"{drift.total} flight(s) differ between Redis flightInfo and PostgreSQL",
                       float(drift.total), {"configured": True, **drift.metadata})


def unsupported_types(f: Figures, drift: Drift | None) -> CheckResult:
    count = sum(n for _, n in f.unsupported_recent)
    types = ", ".join(f"{t} ×{n}" for t, n in f.unsupported_recent)
    window_min = int(UNSUPPORTED_WINDOW.total_seconds() // 60)
    return CheckResult("unsupported_types", count == 0,
                       f"{count} message(s) of unsupported type in the last {window_min} min: {types or 'none'}",
                       float(count), {"unsupported_recent": count, "types": types}, warn_only=True)


def request_timeouts(f: Figures, drift: Drift | None) -> CheckResult:
    timed_out = [f"{rtype}/{styp} #{req_id}" for rtype, styp, status, req_id in f.request_outcomes
                 if status == "TIMEOUT"]
    return CheckResult("request_timeouts", not timed_out,
                       f"{len(timed_out)} request kind(s) whose latest request timed out unanswered: "
                       f"{', '.join(timed_out) or 'none'}", float(len(timed_out)),
                       {"timed_out_kinds": len(timed_out), "requests": ", ".join(timed_out)})


Check = Callable[[Figures, "Drift | None"], CheckResult]
CHECKS: dict[str, Check] = {c.__name__: c for c in (
    backlog_age, dead_letters, delivery_backlog, backfill_lag, projection_drift, unsupported_types,
    request_timeouts)}


def evaluate(f: Figures, drift: Drift | None) -> list[CheckResult]:
    """Every check, in a fixed order."""
    return [check(f, drift) for check in CHECKS.values()]
