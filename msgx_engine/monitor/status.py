"""``msgx status``: the operator's one-screen answer to "is msgx healthy, why not, what do I run?".

It reads what the monitor reads (one ``Figures`` snapshot and every health check in ``CHECKS``,
so a check added there shows up here without a change) plus the few things an operator needs
to act on (the dead letters themselves, the outbox per topic, the newest snapshot of each live
day), and needs neither Dagster nor Prometheus: when those are down, this still answers.

``gather`` does the reading and returns a plain ``StatusReport``; ``status_render`` turns it into
text or JSON. The exit code is part of the report: 0 healthy, 1 some check fails (a warning
included: a dead letter is work for an operator, and a script must see it), 2 the state database
cannot be read or its schema is behind. An unreachable mailbox is a failing check (exit 1), not
2: msgx's own state is still readable and says what waits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.monitor import names
from msgx_engine.monitor.checks import CheckResult, Drift, evaluate
from msgx_engine.monitor.figures import Figures, figures
from msgx_engine.redact import first_line
from msgx_engine.sis.times import LOCAL_TZ
from msgx_engine.store import migrate, overview
from msgx_engine.store.monitoring import PUMP
from msgx_engine.store.overview import DeadLetter, SnapshotRun, TopicBacklog

EXIT_OK, EXIT_FAILING, EXIT_UNREACHABLE = 0, 1, 2
LIVE_DAYS_BACK = 1            # live days: yesterday (airport time), today and every later day with a snapshot
RUNBOOK = "docs/runbook.md"

# The first command to run when a check fails (``{head}``: the queue head's mailbox id). A check
# without one (backfill_lag: the mailbox refuses msgx's marks) points to its runbook section only.
# Dagster commands are in the production form the runbook gives ("Before you start": the code
# server's workspace); a test host without one writes ``-m msgx_dagster.definitions`` instead.
FIRST_COMMAND: dict[str, str] = {
    names.BACKLOG_AGE: "msgx replay --ids {head}",
    names.DEAD_LETTERS: "msgx replay --status DEAD",
    names.DELIVERY_BACKLOG: "msgx outbox",
    names.PROJECTION_DRIFT: "dagster job launch -w /etc/msgx/workspace.yaml -j projection_rebuild_job",
    names.UNSUPPORTED_TYPES: "msgx replay --status SKIPPED --select-reason unsupported",
    names.REQUEST_TIMEOUTS: "msgx request track",
    names.PIPELINE_LIVENESS: "dagster sensor list -w /etc/msgx/workspace.yaml",
    names.STAND_MAPPING: "msgx request rqrd ABDG",
}


class StateUnreachable(Exception):
    """The state database cannot be read, or its schema is not the one this msgx expects."""


# checks whose runbook section is named after the symptom rather than the check
RUNBOOK_SECTIONS = {names.PIPELINE_LIVENESS: "pipeline-stalled"}

# pipeline_liveness failing because the mailbox does not answer: no pump or sensor is at fault, so
# the mailbox's own section and its first command (the runbook's, after `msgx status` itself)
MAILBOX_SECTION = "mailbox-unreachable"
MAILBOX_COMMAND = ('mysql -h MAILBOX_HOST -P 3306 -u MAILBOX_USER -p -e "SELECT MAX(CMINMSGS_ID) FROM cminmsgs" '
                   "aodbinterface")


def anchor(check_name: str) -> str:
    """The runbook section of a check (GitHub's heading slug of its title)."""
    return RUNBOOK_SECTIONS.get(check_name, check_name.replace("_", "-"))


@dataclass(frozen=True)
class CheckLine:
    name: str
    state: str                    # OK, FAILING (an outage) or WARN (a failing warning: an operator's to-do)
    severity: str                 # error or warn
    cause: str
    value: float | None
    first_command: str | None     # set only while the check fails
    runbook: str


@dataclass(frozen=True)
class Backlog:
    open_messages: int
    head_id: int | None
    head_age_s: float
    mailbox_up: bool | None               # None: the mailbox was not read
    unregistered_rows: int | None         # None: not known (the mailbox did not answer)
    unregistered_oldest_age_s: float | None   # None: none waits, or its insert time is unknown
    unregistered_capped: bool             # counted up to the monitor's cap: at least this many
    mailbox_error: str | None
    backfill_pending: int
    backfill_oldest_age_s: float


@dataclass(frozen=True)
class Pump:
    lock_held: bool
    last_heartbeat: datetime | None
    heartbeat_age_s: float | None
    started_at: datetime | None
    host: str | None
    pid: int | None


@dataclass(frozen=True)
class Projection:
    configured: bool
    measured: bool
    differing: int | None
    error: str | None = None


@dataclass(frozen=True)
class StatusReport:
    now: datetime
    mode: str
    checks: list[CheckLine]
    backlog: Backlog
    pump: Pump
    dead_letters_waiting: int
    dead_letters: list[DeadLetter]
    outbox: list[TopicBacklog]
    snapshots: list[SnapshotRun]
    live_since: date
    projection: Projection
    cutover: str | None = None    # "writes stopped for cut-over at mailbox id W (by NAME, at TIME)"; None: writes open

    @property
    def failing(self) -> list[CheckLine]:
        return [c for c in self.checks if c.state != "OK"]

    @property
    def exit_code(self) -> int:
        return EXIT_FAILING if self.failing else EXIT_OK


def check_line(r: CheckResult, head_id: int | None) -> CheckLine:
    state = "OK" if r.passed else ("WARN" if r.warn_only else "FAILING")
    command = FIRST_COMMAND.get(r.name) if not r.passed else None
    if command is not None:
        command = command.format(head=head_id if head_id is not None else "ID")
    section = anchor(r.name)
    if r.name == names.PIPELINE_LIVENESS and not r.passed and "mailbox_error" in r.metadata:
        command, section = MAILBOX_COMMAND, MAILBOX_SECTION
    return CheckLine(r.name, state, "warn" if r.warn_only else "error", r.summary, r.value, command,
                     f"{RUNBOOK}#{section}")


def read_state(engine: Engine, mailbox: Mailbox | None) -> Figures:
    """The monitor's figures, or ``StateUnreachable`` with a one-line reason."""
    try:
        if not migrate.is_current(engine):
            raise StateUnreachable(
                f"state database schema is at revision {migrate.current_revision(engine)!r}, this msgx expects "
                f"{migrate.head_revision()!r}: run `msgx db upgrade`")
        return figures(engine, mailbox)
    except SQLAlchemyError as exc:
        raise StateUnreachable(f"state database unreachable: {first_line(exc)}") from exc


def measure_drift(probe: Callable[[], Drift | None] | None) -> Drift | None:
    """The projection comparison when Redis is configured (a Redis that cannot be read is drift we
    cannot rule out, as the monitor says too)."""
    if probe is None:
        return None
    try:
        return probe()
    except Exception as exc:  # noqa: BLE001 - any Redis failure is reported, never raised
        return Drift(total=0, error=first_line(exc))


def with_kinds(letters: list[DeadLetter], mailbox: Mailbox | None) -> list[DeadLetter]:
    """Dead letters whose body could not be decoded have no TYPE/STYP of their own: take them from
    their mailbox rows (one read of at most the listed ids; a mailbox that fails leaves them ?/?)."""
    unknown = [d.msg_id for d in letters if d.msg_type is None]
    if not unknown or mailbox is None:
        return letters
    try:
        kinds = mailbox.kinds(unknown)
    except SQLAlchemyError:
        return letters
    return [replace(d, msg_type=kinds[d.msg_id][0], msg_styp=kinds[d.msg_id][1])
            if d.msg_type is None and d.msg_id in kinds else d for d in letters]


def gather(engine: Engine, mailbox: Mailbox | None, *, mode: str,
           drift_probe: Callable[[], Drift | None] | None = None, kafka_configured: bool = True) -> StatusReport:
    """Read everything ``msgx status`` shows. ``drift_probe``: the projection comparison, given only
    when Redis is configured (about half a second for 10,000 flights). ``kafka_configured``: False
    makes delivery_backlog say "not configured" (MSGX_KAFKA_BOOTSTRAP unset)."""
    f = replace(read_state(engine, mailbox), kafka_configured=kafka_configured)
    drift = measure_drift(drift_probe)
    since = f.now.astimezone(LOCAL_TZ).date() - timedelta(days=LIVE_DAYS_BACK)
    try:
        with engine.connect() as conn:
            topics = overview.outbox_by_topic(conn)
            snapshots = overview.latest_snapshots(conn, since)
    except SQLAlchemyError as exc:
        raise StateUnreachable(f"state database unreachable: {first_line(exc)}") from exc
    beat = f.heartbeat(PUMP)
    pump = Pump(f.pump_lock_held, beat.beat_at if beat else None, f.age_s(beat.beat_at) if beat else None,
                beat.started_at if beat else None, beat.host if beat else None, beat.pid if beat else None)
    side = f.mailbox
    known_age = side is not None and side.up and side.oldest_at is not None and not side.unstamped
    backlog = Backlog(f.open_messages, f.head_id, f.head_age_s, f.mailbox_up,
                      f.unregistered_rows if f.mailbox_up else None,
                      f.unregistered_age_s if known_age else None, side.capped if side is not None else False,
                      side.error if side is not None else None,
                      f.backfill_pending, f.backfill_age_s)
    if drift is None:
        projection = Projection(configured=drift_probe is not None, measured=False, differing=None)
    else:
        projection = Projection(configured=True, measured=drift.error is None,
                                differing=drift.total if drift.error is None else None, error=drift.error)
    checks = [check_line(r, f.head_id) for r in evaluate(f, drift)]
    letters = with_kinds(list(f.dead_letters), mailbox if f.mailbox_up else None)
    return StatusReport(now=f.now, mode=mode, checks=checks, backlog=backlog, pump=pump,
                        dead_letters_waiting=f.dead, dead_letters=letters, outbox=topics,
                        snapshots=snapshots, live_since=since, projection=projection,
                        cutover=f.stop.describe() if f.stop is not None else None)
