"""The health checks, as pure functions of the monitor's figures.

One definition serves every reader: the Dagster asset checks, the scheduled evaluation that alerts
on state changes, ``msgx status``, ``/metrics`` (``msgx_check_failing``) and the docs. Each check
says what "healthy" means in one sentence and returns its headline figure, so the alert text and
the check's metadata read the same numbers. A failing check's summary names the cause in words and
the first command to run: it is the alert text an operator reads at night.

Projection drift needs Redis and a full comparison, so it is not a figure: the caller measures it
(``App.projection_drift``) and hands in the result, or None when no Redis is configured.

Pipeline liveness (``liveness``) is the one rule shared with ``/metrics``' ``msgx_pipeline_stalled``:
work waits (unregistered mailbox rows, open messages, mailbox marks to write) for longer than
``WORK_GRACE_S`` and no pump is alive. A pump is alive while it holds the writer lock and its
heartbeat (every 10-15 s while it loops) is younger than ``HEARTBEAT_LIMIT_S``. Between two pump
runs (one exits, the sensor starts the next within seconds) a pump that looped until less than
``HEARTBEAT_LIMIT_S`` ago still counts; a run that only ever wrote its start beat does not, so
runs failing as they start are caught, however often they restart.

An installation whose writes are stopped for a cut-over (``msgx cutover stop-writes``) runs no pump
by design, and the rows registered ahead of its watermark stay open: they are the installation's
that took over. Pipeline liveness and backlog age then pass, saying "writes stopped for cut-over at
mailbox id W (by NAME, at TIME)", and ``/metrics`` exports the stop (``msgx_cutover_writes_stopped``)
for the Prometheus rules to stay silent on the same ground. That is the only reason they pass
with work waiting: the rule is otherwise unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from msgx_engine.monitor import names, thresholds
from msgx_engine.monitor.figures import Figures
from msgx_engine.store.monitoring import PUMP
from msgx_engine.store.requests import RequestStatus

Scalar = str | int | float | bool
# the limits in seconds, as the checks compare them (defined in ``thresholds``)
MAX_HEAD_AGE_S = thresholds.HEAD_AGE.seconds
MAX_UNSENT_AGE_S = thresholds.UNSENT_AGE.seconds
MAX_BACKFILL_AGE_S = thresholds.BACKFILL_AGE.seconds
HEARTBEAT_LIMIT_S = thresholds.HEARTBEAT_LIMIT.seconds
WORK_GRACE_S = thresholds.WORK_GRACE.seconds
EXCERPT_CHARS = 120
SEND_ERROR_CHARS = 300      # Kafka's error text with the broker's own words (the client's "Connect to ... failed")

REPLAY_DEAD = "msgx replay --status DEAD"
ACKNOWLEDGE = "msgx acknowledge ID… --operator NAME --reason TEXT"


@dataclass(frozen=True)
class Drift:
    """What the projection comparison found (the caller's measurement, see module doc)."""

    total: int
    metadata: Mapping[str, Scalar] = field(default_factory=dict)
    error: str | None = None        # Redis could not be read: drift cannot be ruled out


@dataclass(frozen=True)
class Rising:
    """What a counting check alerts on again when it rises: how many, and the ids behind them."""

    noun: str                       # "dead letter(s)"
    id_label: str                   # "mailbox id"
    count: int
    ids: tuple[int, ...]            # ascending, capped (figures.ALERT_IDS_CAP)


@dataclass(frozen=True)
class CheckResult:
    name: str
    passed: bool
    summary: str                          # the alert text and the UI's description: cause and first command
    value: float | None = None            # the headline figure (stored, exported as a metric)
    metadata: Mapping[str, Scalar] = field(default_factory=dict)
    warn_only: bool = False               # severity WARN in Dagster (an operator's to-do, not an outage)
    rising: Rising | None = None          # a count that alerts again on every rise while failing
    rows: tuple[Mapping[str, Scalar], ...] = ()   # what the operator acts on (dead letters), for a table


def ago(seconds: float) -> str:
    """A duration as an operator says it: 45 s, 14 min, 3 h 5 min, 2 d."""
    if math.isinf(seconds):
        return "an unknown time"
    s = int(round(seconds))
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    if s < 172800:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d"


def excerpt(text: str | None, limit: int = EXCERPT_CHARS) -> str:
    """At most ``limit`` characters, cut between words: a FLID or an id is shown whole or not at all
    (a cut "flight 2612070" names another flight)."""
    flat = " ".join((text or "").split())
    if len(flat) <= limit:
        return flat
    cut = flat[:limit - 2]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut) + " …"


# --- liveness (shared with /metrics) ---------------------------------------------------------------
@dataclass(frozen=True)
class Liveness:
    waiting: list[str]              # what waits, in words ("50 mailbox rows wait, the oldest 95 s")
    work_age_s: float               # the oldest waiting work (inf: rows without an insert time)
    pump_alive: bool
    pump_state: str                 # the pump as an operator would describe it
    stalled: bool


def liveness(f: Figures) -> Liveness:
    """Is work waiting with no pump alive (see the module doc)?"""
    waiting: list[str] = []
    ages: list[float] = []
    if f.unregistered_rows:
        side = f.mailbox
        assert side is not None
        age = math.inf if side.oldest_at is None or side.unstamped else f.unregistered_age_s
        more = "+" if side.capped else ""
        waiting.append(f"{f.unregistered_rows}{more} mailbox row(s) wait to be registered, the oldest "
                       f"{ago(f.unregistered_age_s) if side.oldest_at is not None else 'of unknown age'}")
        ages.append(age)
    if f.open_messages:
        waiting.append(f"{f.open_messages} registered message(s) are open, the oldest {ago(f.head_age_s)}")
        ages.append(f.head_age_s)
    if f.backfill_pending:
        waiting.append(f"{f.backfill_pending} mailbox mark(s) wait to be written, the oldest {ago(f.backfill_age_s)}")
        ages.append(f.backfill_age_s)
    beat = f.heartbeat(PUMP)
    beat_age = f.age_s(beat.beat_at) if beat else math.inf
    looped = beat is not None and (beat.started_at is None or beat.beat_at > beat.started_at)
    alive = f.pump_lock_held and beat_age < HEARTBEAT_LIMIT_S
    if alive:
        state = f"a pump is running (last heartbeat {ago(beat_age)} ago)"
    elif f.pump_lock_held:
        state = (f"a pump holds the writer lock but has not beaten for {ago(beat_age)}: it hangs"
                 if beat else "a pump holds the writer lock but never beat: it hangs")
    elif beat is None:
        state = "no pump has ever run"
    elif not looped and beat_age < thresholds.START_FAILURE_WINDOW.seconds:
        state = (f"no pump is running: the last one started {ago(beat_age)} ago and stopped before it "
                 "began processing (pump runs fail as they start)")
    else:
        state = f"no pump is running (last heartbeat {ago(beat_age)} ago)"
    between_runs = not f.pump_lock_held and looped and beat_age < HEARTBEAT_LIMIT_S
    work_age = max(ages, default=0.0)
    if f.stop is not None:
        state = f"{f.stop.describe()}: no pump runs on this installation by design"
    stalled = bool(waiting) and work_age >= WORK_GRACE_S and not alive and not between_runs and f.stop is None
    return Liveness(waiting, work_age, alive, state, stalled)


def stopped_metadata(f: Figures) -> dict[str, Scalar]:
    """The stop as check metadata (the Dagster UI shows it under the check), empty when writes are open."""
    return {"cutover": f.stop.describe()} if f.stop is not None else {}


def pipeline_liveness(f: Figures, drift: Drift | None) -> CheckResult:
    live = liveness(f)
    meta: dict[str, Scalar] = {
        "pump_alive": live.pump_alive, "pump": live.pump_state, "open": f.open_messages,
        "backfill_pending": f.backfill_pending,
        "oldest_work_age_s": round(live.work_age_s, 1) if not math.isinf(live.work_age_s) else -1.0,
        **stopped_metadata(f)}
    if f.mailbox is not None:
        meta.update(mailbox_up=f.mailbox.up, unregistered_rows=f.unregistered_rows,
                    unregistered_oldest_age_s=round(f.unregistered_age_s, 1))
    work = "; ".join(live.waiting) or "no work waits"
    value = None if math.isinf(live.work_age_s) else round(live.work_age_s, 1)
    if f.mailbox is not None and not f.mailbox.up:
        meta["mailbox_error"] = f.mailbox.error or ""
        return CheckResult(names.PIPELINE_LIVENESS, False,
                           f"the mailbox cannot be read ({f.mailbox.error}), so rows waiting there cannot be seen; "
                           f"{work}; {live.pump_state}. First run `msgx status`, then check that the mailbox "
                           "database answers from this host.", value, meta)
    if f.stop is not None:
        return CheckResult(names.PIPELINE_LIVENESS, True, f"{live.pump_state}; {work}", value, meta)
    if live.stalled:
        return CheckResult(names.PIPELINE_LIVENESS, False,
                           f"{work}; {live.pump_state}. First run `msgx status`; then check that the Dagster "
                           "daemon runs and inbox_sensor is on, and read the latest pump_job run's log "
                           "(`msgx pump --drain` processes the backlog by hand meanwhile).", value, meta)
    return CheckResult(names.PIPELINE_LIVENESS, True, f"{work}; {live.pump_state}", value, meta)


# --- the other checks ------------------------------------------------------------------------------
def backlog_age(f: Figures, drift: Drift | None) -> CheckResult:
    age = round(f.head_age_s, 1)
    meta: dict[str, Scalar] = {"oldest_open_age_s": age, "open": f.open_messages, "head_id": f.head_id or 0}
    text = (f"oldest open message {f.head_id} registered {ago(age)} ago (limit {ago(MAX_HEAD_AGE_S)}), "
            f"{f.open_messages} open" if f.head_id is not None else "no open message")
    if f.stop is not None:
        return CheckResult(names.BACKLOG_AGE, True, f"{f.stop.describe()}: the open messages above it are the "
                           f"installation's that took over, not this one's; {text}", age,
                           {**meta, **stopped_metadata(f)})
    if age < MAX_HEAD_AGE_S:
        return CheckResult(names.BACKLOG_AGE, True, text, age, meta)
    return CheckResult(names.BACKLOG_AGE, False,
                       f"{text}: the queue is stuck on that message (waiting for Redis, the database or an "
                       f"operator) or no pump runs. First run `msgx status`; `msgx replay --ids {f.head_id}` "
                       f"previews the head, `msgx skip {f.head_id} --operator NAME --reason TEXT` ends it.",
                       age, meta)


def dead_letters(f: Figures, drift: Drift | None) -> CheckResult:
    rows: tuple[dict[str, Scalar], ...] = tuple(
        {"mailbox_id": d.msg_id, "type": f"{d.msg_type or '?'}/{d.msg_styp or '?'}",
         "reason": d.reason or d.error_class or "", "error": excerpt(d.error_excerpt)} for d in f.dead_letters)
    lines = [f"{r['mailbox_id']} {r['type']} {r['reason']}" + (f": {r['error']}" if r["error"] else "")
             for r in rows]
    meta: dict[str, Scalar] = {"dead": f.dead, "listed": len(rows),
                               "oldest_ids": ", ".join(str(r["mailbox_id"]) for r in rows),
                               "waiting": "\n".join(lines), "preview_replay": REPLAY_DEAD, "acknowledge": ACKNOWLEDGE}
    rising = Rising("dead letter(s)", "mailbox id", f.dead, f.dead_ids)
    if f.dead == 0:
        return CheckResult(names.DEAD_LETTERS, True, "no dead letter waits for an operator", 0.0, meta, warn_only=True,
                           rising=rising)
    shown = f"the {len(rows)} oldest" if f.dead > len(rows) else "they are"
    return CheckResult(names.DEAD_LETTERS, False,
                       f"{f.dead} dead letter(s) wait for an operator; {shown}: {'; '.join(lines)}. First run "
                       f"`{REPLAY_DEAD}` to preview their replay; `{ACKNOWLEDGE}` closes one a replay "
                       "cannot fix (exhausted and missing ones are replayable once their cause is fixed).",
                       float(f.dead), meta, warn_only=True, rising=rising, rows=rows)


def delivery_backlog(f: Figures, drift: Drift | None) -> CheckResult:
    age = round(f.unsent_age_s, 1)
    ids = ", ".join(str(i) for i in f.dead_event_ids[:20]) + (" …" if len(f.dead_event_ids) > 20 else "")
    meta: dict[str, Scalar] = {"unsent_released_events": f.unsent_events, "oldest_unsent_age_s": age,
                               "dead_events": f.dead_events, "dead_event_ids": ids}
    rising = Rising("dead outbox event(s)", "event id", f.dead_events, f.dead_event_ids)
    text = (f"{f.unsent_events} undelivered event(s), oldest released {ago(age)} ago (limit {ago(MAX_UNSENT_AGE_S)}), "
            f"{f.dead_events} dead event(s)")
    if not f.kafka_configured and f.dead_events == 0:
        # No Kafka configured (the demo, a shadow try-out): events stay pending in the outbox by
        # design and nothing delivers them, so their age is no fault. Reported like the Redis
        # projection's "not configured"; dead events from an earlier configuration still fail.
        return CheckResult(names.DELIVERY_BACKLOG, True,
                           f"Kafka not configured (MSGX_KAFKA_BOOTSTRAP unset): {f.unsent_events} released "
                           "event(s) stay pending in the outbox", None, {**meta, "configured": False},
                           rising=rising)
    if f.dead_events == 0 and age < MAX_UNSENT_AGE_S:
        return CheckResult(names.DELIVERY_BACKLOG, True, text, age, meta, rising=rising)
    causes = []
    if age >= MAX_UNSENT_AGE_S:
        causes.append("Kafka is down or slow, or no dispatcher runs")
    kafka = f.kafka
    if kafka is not None and kafka.failing and kafka.error_at is not None:
        meta.update(broker=kafka.broker, last_send_error=excerpt(kafka.last_error, SEND_ERROR_CHARS),
                    last_send_error_age_s=round(f.age_s(kafka.error_at), 1))
        causes.append(f"the last send to {kafka.broker} failed {ago(f.age_s(kafka.error_at))} ago: "
                      f"{excerpt(kafka.last_error, SEND_ERROR_CHARS)}")
    if f.dead_events:
        causes.append(f"events Kafka refused, given up after their delivery attempts (event ids {ids}), hold "
                      "their flights' later events back until revived")
    return CheckResult(names.DELIVERY_BACKLOG, False,
                       f"{text}: {'; '.join(causes)}. First run `msgx outbox` to see them; "
                       "`msgx outbox --apply --operator NAME --reason TEXT` revives dead events, "
                       "`msgx dispatch --drain` delivers now.", age, meta, rising=rising)


def backfill_lag(f: Figures, drift: Drift | None) -> CheckResult:
    age = round(f.backfill_age_s, 1)
    meta: dict[str, Scalar] = {"backfill_pending": f.backfill_pending, "oldest_backfill_age_s": age}
    text = (f"{f.backfill_pending} mailbox mark(s) to write, oldest queued {ago(age)} ago "
            f"(limit {ago(MAX_BACKFILL_AGE_S)})")
    if age < MAX_BACKFILL_AGE_S:
        return CheckResult(names.BACKFILL_LAG, True, text, age, meta)
    return CheckResult(names.BACKFILL_LAG, False,
                       f"{text}: the mailbox refuses msgx's processed-marks, or neither a pump nor backfill_job "
                       "runs. First run `msgx status`, then read the latest pump_job or backfill_job run's log.",
                       age, meta)


def projection_drift(f: Figures, drift: Drift | None) -> CheckResult:
    if drift is None:
        return CheckResult(names.PROJECTION_DRIFT, True, "no Redis projection configured", None, {"configured": False})
    if drift.error is not None:
        return CheckResult(names.PROJECTION_DRIFT, False,
                           f"projection drift not measured: Redis cannot be read ({drift.error}). First check that "
                           "Redis answers (`redis-cli -u $MSGX_REDIS_URL ping`).", None,
                           {"configured": True, "error": drift.error})
    text = f"{drift.total} flight(s) differ between Redis flightInfo and PostgreSQL"
    if drift.total == 0:
        return CheckResult(names.PROJECTION_DRIFT, True, text, 0.0, {"configured": True, **drift.metadata})
    return CheckResult(names.PROJECTION_DRIFT, False,
                       f"{text}. First run `msgx status`, then launch projection_rebuild_job in Dagster to rebuild "
                       "the projection from PostgreSQL.", float(drift.total), {"configured": True, **drift.metadata})


def unsupported_types(f: Figures, drift: Drift | None) -> CheckResult:
    count = sum(n for _, n in f.unsupported_recent)
    types = ", ".join(f"{t} ×{n}" for t, n in f.unsupported_recent)
    window = ago(thresholds.UNSUPPORTED_WINDOW.seconds)
    text = f"{count} message(s) of unsupported type in the last {window}: {types or 'none'}"
    meta: dict[str, Scalar] = {"unsupported_recent": count, "types": types}
    if count == 0:
        return CheckResult(names.UNSUPPORTED_TYPES, True, text, 0.0, meta, warn_only=True)
    return CheckResult(names.UNSUPPORTED_TYPES, False,
                       f"{text}: the AODB sends types msgx does not process. First run "
                       "`msgx replay --status SKIPPED --select-reason unsupported` to preview them; replay them "
                       f"once the type is supported, or close them with `{ACKNOWLEDGE}`.", float(count), meta,
                       warn_only=True)


def request_timeouts(f: Figures, drift: Drift | None) -> CheckResult:
    timed_out = [f"{rtype}/{styp} #{req_id}" for rtype, styp, status, req_id in f.request_outcomes
                 if status == RequestStatus.TIMEOUT]
    text = (f"{len(timed_out)} request kind(s) whose latest request timed out unanswered: "
            f"{', '.join(timed_out) or 'none'}")
    meta: dict[str, Scalar] = {"timed_out_kinds": len(timed_out), "requests": ", ".join(timed_out)}
    if not timed_out:
        return CheckResult(names.REQUEST_TIMEOUTS, True, text, 0.0, meta)
    return CheckResult(names.REQUEST_TIMEOUTS, False,
                       f"{text}: the AODB did not answer in time. First run `msgx status`, then ask the AODB side "
                       "whether it reads COUTMSGS; `msgx request track` sends what is registered.",
                       float(len(timed_out)), meta)


def stand_mapping(f: Figures, drift: Drift | None) -> CheckResult:
    """Fails while a live flight publishes its stands with airbridges null. A mapping never loaded
    fails it as soon as a flight names a stand; before that it is said in the summary only, so a
    new installation is not flagged before there is anything to map."""
    status = f.stand_mapping
    if status is None:
        return CheckResult(names.STAND_MAPPING, True, "stand -> airbridge mapping not measured", None, {},
                           warn_only=True)
    meta: dict[str, Scalar] = dict(status.as_metadata())
    if status.flights_unknown == 0:
        text = ("the stand -> airbridge mapping is loaded; every live flight's stands have their airbridges"
                if status.loaded else "the stand -> airbridge mapping (ABDG reference data) is not loaded yet; "
                "no live flight names a stand")
        return CheckResult(names.STAND_MAPPING, True, text, 0.0, meta, warn_only=True)
    cause = ("the stand -> airbridge mapping (ABDG reference data) was never loaded" if not status.loaded
             else "the stand -> airbridge mapping is loaded but not applied to every flight")
    return CheckResult(names.STAND_MAPPING, False,
                       f"{cause}: {status.flights_unknown} live flight(s) publish their stands with airbridges "
                       "null. First run `msgx request rqrd ABDG` to ask the AODB for the mapping; "
                       "`msgx request track` sends it.", float(status.flights_unknown), meta, warn_only=True)


Check = Callable[[Figures, "Drift | None"], CheckResult]
_BY_NAME: dict[str, Check] = {
    names.BACKLOG_AGE: backlog_age, names.DEAD_LETTERS: dead_letters, names.DELIVERY_BACKLOG: delivery_backlog,
    names.BACKFILL_LAG: backfill_lag, names.PROJECTION_DRIFT: projection_drift,
    names.UNSUPPORTED_TYPES: unsupported_types, names.REQUEST_TIMEOUTS: request_timeouts,
    names.PIPELINE_LIVENESS: pipeline_liveness, names.STAND_MAPPING: stand_mapping}
CHECKS: dict[str, Check] = {name: _BY_NAME[name] for name in names.CHECK_NAMES}   # in evaluation order


def evaluate(f: Figures, drift: Drift | None) -> list[CheckResult]:
    """Every check, in a fixed order."""
    return [check(f, drift) for check in CHECKS.values()]
