"""The 48-hour observation after a cut-over (OPS-4: "切流后 48 小时观察，24 小时内具备经演练的回滚能力":
48 hours of watch after the switch, and a rehearsed rollback possible within 24 hours).

The installation that took the right over (``msgx cutover promote``, or a rollback to it) is
watched for 48 hours from that moment with the parallel run's own figures, hour by hour: the
dead-letter backlog and the oldest undelivered event's wait, each the worst the health tick saw in
the hour (``store.parallel_run``, folded every 30 s). The observation fails when an hour had a dead
letter waiting, an event waiting 5 s or more, or no health reading at all (nobody watched it: the
Dagster daemon or the health sensor was down); it passes once 48 hours have gone by without that.
Until then it is "watching". The first 24 hours are the rollback window: the runbook's cut-over
section says what keeps the rollback possible meanwhile, and the report says until when.

``observe`` is pure; ``read`` takes the takeover and the hours from the state database.
``msgx compare --summary`` and the ``parallel_run`` asset (``compare_job``) report it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection

from msgx_engine.sis.times import LOCAL_TZ
from msgx_engine.store import cutover_state, parallel_run
from msgx_engine.store.cutover_state import Takeover
from msgx_engine.store.parallel_run import Hour

WATCH = timedelta(hours=48)
ROLLBACK_WINDOW = timedelta(hours=24)
DWELL_LIMIT_S = 5.0          # OPS-4: the oldest undelivered event waits under 5 s (the parallel run's limit too)
HOUR = timedelta(hours=1)


def _hour_of(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def observe(took: Takeover, hours: Sequence[Hour], now: datetime) -> dict[str, Any]:
    """The observation of the 48 hours after ``took`` as of ``now``. Every hour of the window that has
    ended must have a reading; the hour still running, and the window's last partial hour, need not."""
    since, until = took.at, took.at + WATCH
    end = min(now, until)
    seen = {_hour_of(h.hour): h for h in hours if since - HOUR < h.hour < until}
    ended = []
    start = _hour_of(since)
    while start + HOUR <= end:
        ended.append(start)
        start += HOUR
    unwatched = [h for h in ended if h not in seen]
    dlq = max((h.worst.dlq for h in seen.values()), default=0)
    dwell = max((h.worst.dwell_s for h in seen.values()), default=0.0)
    reasons = []
    if dlq:
        first = min(h.hour for h in seen.values() if h.worst.dlq)
        reasons.append(f"the dead-letter backlog reached {dlq} (first in the hour from {short(first)})")
    if dwell >= DWELL_LIMIT_S:
        worst = max(seen.values(), key=lambda h: h.worst.dwell_s)
        reasons.append(f"the oldest undelivered event waited {dwell:.1f} s in the hour from {short(worst.hour)} "
                       f"(limit {DWELL_LIMIT_S:.0f} s)")
    if unwatched:
        shown = ", ".join(short(h) for h in unwatched[:5]) + (" …" if len(unwatched) > 5 else "")
        reasons.append(f"{len(unwatched)} hour(s) without a health reading (the health sensor or the Dagster daemon "
                       f"did not run): {shown}")
    state = "failed" if reasons else "passed" if now >= until else "watching"
    return {
        "took_over": took.how, "watermark": took.watermark, "by": took.operator,
        "since": since.isoformat(), "until": until.isoformat(), "state": state, "reasons": reasons,
        "rollback_until": (since + ROLLBACK_WINDOW).isoformat(), "rollback_open": now < since + ROLLBACK_WINDOW,
        "hours_ended": len(ended), "hours_watched": len(seen), "health_readings": sum(h.worst.readings for h in
                                                                                      seen.values()),
        "dlq_backlog_max": dlq, "oldest_dwell_s_max": dwell, "dwell_limit_s": DWELL_LIMIT_S,
        "hours": [{"hour": h.hour.isoformat(), "dlq_max": h.worst.dlq, "dwell_max_s": h.worst.dwell_s,
                   "readings": h.worst.readings} for h in sorted(seen.values(), key=lambda h: h.hour)],
    }


def read(conn: Connection, now: datetime) -> dict[str, Any] | None:
    """The observation after this installation's takeover (None: it never took over, or is stopped)."""
    took = cutover_state.takeover(conn)
    if took is None:
        return None
    return observe(took, parallel_run.hours_between(conn, took.at, took.at + WATCH), now)


def open_at(doc: dict[str, Any] | None, now: datetime) -> bool:
    """The 48 hours (and the hour after them, so their last hour is reported) are not over at ``now``."""
    return doc is not None and now < datetime.fromisoformat(doc["until"]) + HOUR


def short(at: datetime) -> str:
    """A moment as the reports write it: airport time to the minute."""
    return at.astimezone(LOCAL_TZ).strftime("%Y-%m-%d %H:%M")


def as_markdown(doc: dict[str, Any]) -> str:
    """The observation as the summary's and the asset's markdown section."""
    since, until = datetime.fromisoformat(doc["since"]), datetime.fromisoformat(doc["until"])
    rollback = datetime.fromisoformat(doc["rollback_until"])
    lines = ["## The 48 hours after the cut-over", "",
             f"- this installation took the right over by {doc['took_over']} at mailbox id {doc['watermark']} "
             f"(by {doc['by']}, at {short(since)} airport time); watched until {short(until)}",
             f"- rollback {'possible until' if doc['rollback_open'] else 'window ended'} {short(rollback)} "
             "(runbook: Cut-over and rollback)",
             f"- **{doc['state'].upper()}**" + ("" if not doc["reasons"] else ": " + "; ".join(doc["reasons"])),
             f"- hours ended: {doc['hours_ended']}, watched: {doc['hours_watched']} ({doc['health_readings']} "
             "health readings)",
             f"- worst dead-letter backlog {doc['dlq_backlog_max']} (required 0); worst wait of the oldest "
             f"undelivered event {doc['oldest_dwell_s_max']:.1f} s (required under {doc['dwell_limit_s']:.0f} s)"]
    if doc["hours"]:
        lines += ["", "| hour (airport time) | dead letters | oldest wait (s) | readings |", "|---|---:|---:|---:|"]
        lines += [f"| {short(datetime.fromisoformat(h['hour']))} | {h['dlq_max']} | {h['dwell_max_s']:.1f} | "
                  f"{h['readings']} |" for h in doc["hours"]]
    return "\n".join(lines) + "\n"
