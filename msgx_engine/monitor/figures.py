"""The monitor's figures: one read-only snapshot that ``/metrics``, the health checks and
``msgx status`` are all computed from, so a scrape and an alert never disagree about the same moment.

PostgreSQL side: each figure is one aggregate over a partial index or a table archiving keeps small
(``proc_state``, ``backfill_todo``, ``msg_event``, ``req_track``, the monitor's own tables), read in
one REPEATABLE READ snapshot: a handful of cheap statements per call, whatever the traffic. Ages are
measured against PostgreSQL's clock, the same clock that stamped the rows.

Mailbox side (when the caller hands in the mailbox): the rows above the position the intake
accounts for that are not registered yet, counted up to ``UNREGISTERED_CAP`` by primary key, and
the insert time of the oldest. Without it a stalled pump looks healthy: nothing is registered, so
nothing is open. The read runs after the PostgreSQL snapshot (no transaction stays open while the
mailbox answers) and is given ``MAILBOX_TIMEOUT_S``: a mailbox that refuses, fails or hangs gives
``mailbox.up = False`` with the reason, and every PostgreSQL figure still comes.

The mailbox's DATETIME columns hold naive wall-clock times; msgx writes them as its host's local
time (``clock.local_wall_time``), and reads them back the same way here, as an instant, before
comparing with PostgreSQL's ``now()``. Neither server's time zone setting enters the sum.

Redis and Kafka are not read: any instance reports the same truth, and a scrape never waits for them.
What the dispatcher last heard from Kafka is read from PostgreSQL (``store.kafka_status``).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from sqlalchemy import Connection, Engine, func, select

from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.monitor import thresholds
from msgx_engine.redact import safe_text
from msgx_engine.store import (
    cutover_state,
    kafka_status,
    locks,
    monitoring,
    outbox,
    overview,
    queue_figures,
    registration,
    requests,
)
from msgx_engine.store.bridges import MappingStatus, mapping_status
from msgx_engine.store.cutover_state import Stop
from msgx_engine.store.kafka_status import KafkaStatus
from msgx_engine.store.monitoring import AlertState, Heartbeat
from msgx_engine.store.overview import DeadLetter

UNSUPPORTED_WINDOW = timedelta(seconds=thresholds.UNSUPPORTED_WINDOW.seconds)
UNREGISTERED_CAP = 10_000      # unregistered mailbox rows are counted up to this (a PK-bounded read)
MAILBOX_TIMEOUT_S = 3.0        # the mailbox read's limit: past it the mailbox counts as down for this snapshot
DEAD_LETTERS_LISTED = 20       # the oldest waiting dead letters carried with their reasons
ALERT_IDS_CAP = 1000           # ids carried for re-alerting (dead letters, dead events)


@dataclass(frozen=True)
class MailboxSide:
    """What the monitor read from the mailbox."""

    up: bool                              # the mailbox answered this read
    unregistered: int = 0                 # rows above the intake's position not registered (at most the cap)
    oldest_at: datetime | None = None     # insert time of the oldest of them, as an instant
    unstamped: bool = False               # some of them carry no insert time (their age is unknown)
    error: str | None = None              # why it did not answer

    @property
    def capped(self) -> bool:
        return self.unregistered >= UNREGISTERED_CAP


@dataclass(frozen=True)
class Figures:
    now: datetime
    open_messages: int
    head_id: int | None
    oldest_open_at: datetime | None
    by_status_reason: list[tuple[str, str | None, int]]
    dead: int                                                # DEAD messages no operator acknowledged
    backfill_pending: int
    oldest_backfill_at: datetime | None
    unsent_by_topic: dict[str, int]
    oldest_unsent_at: datetime | None
    dead_events: int
    requests: list[tuple[str, str, int]]                     # (rtype, status, count)
    request_outcomes: list[tuple[str, str, str, int]]        # newest outcome per (rtype, styp)
    unsupported_recent: list[tuple[str, int]]                # TYPE-STYP skipped as unsupported lately, unacknowledged
    pump_lock_held: bool
    heartbeats: list[Heartbeat] = field(default_factory=list)
    alerts: dict[str, AlertState] = field(default_factory=dict)
    mailbox: MailboxSide | None = None                       # None: the caller did not hand in the mailbox
    dead_letters: tuple[DeadLetter, ...] = ()                # the oldest waiting ones, by mailbox id
    dead_ids: tuple[int, ...] = ()                           # waiting dead letters' ids (up to ALERT_IDS_CAP)
    dead_event_ids: tuple[int, ...] = ()                     # dead outbox events' ids (up to ALERT_IDS_CAP)
    stand_mapping: MappingStatus | None = None
    stop: Stop | None = None                                 # writes stopped for a cut-over: no pump by design
    kafka: KafkaStatus | None = None                         # the dispatcher's last send error (None: never one)
    # Not read from PostgreSQL: whether this process has Kafka configured (MSGX_KAFKA_BOOTSTRAP),
    # set by the caller from its settings. Without Kafka the released events stay pending by
    # design, and delivery_backlog says "not configured" instead of failing (as Redis does).
    kafka_configured: bool = True

    def age_s(self, at: datetime | None) -> float:
        """Seconds from ``at`` to now, 0 when there is nothing (no open message, no todo)."""
        return max((self.now - at).total_seconds(), 0.0) if at is not None else 0.0

    @property
    def head_age_s(self) -> float:
        return self.age_s(self.oldest_open_at)

    @property
    def backfill_age_s(self) -> float:
        return self.age_s(self.oldest_backfill_at)

    @property
    def unsent_age_s(self) -> float:
        return self.age_s(self.oldest_unsent_at)

    @property
    def unsent_events(self) -> int:
        return sum(self.unsent_by_topic.values())

    @property
    def mailbox_up(self) -> bool | None:
        """Whether the mailbox answered; None when it was not read."""
        return self.mailbox.up if self.mailbox is not None else None

    @property
    def unregistered_rows(self) -> int:
        """Mailbox rows waiting to be registered (0 when the mailbox was not read or did not answer)."""
        return self.mailbox.unregistered if self.mailbox is not None and self.mailbox.up else 0

    @property
    def unregistered_age_s(self) -> float:
        """Age of the oldest unregistered mailbox row (0 when none, or when its insert time is unknown)."""
        return self.age_s(self.mailbox.oldest_at) if self.mailbox is not None and self.unregistered_rows else 0.0

    @property
    def last_evaluation_at(self) -> datetime | None:
        """When the health checks were last evaluated (the newest ``alert_state.evaluated_at``)."""
        return max((a.evaluated_at for a in self.alerts.values()), default=None)

    def heartbeat(self, component: str) -> Heartbeat | None:
        return next((h for h in self.heartbeats if h.component == component), None)


def read_figures(conn: Connection, mailbox: Mailbox | None = None) -> Figures:
    """Every figure: PostgreSQL's in one REPEATABLE READ snapshot (the caller's connection, not yet
    in a transaction), then the mailbox's, when given."""
    conn.execution_options(isolation_level="REPEATABLE READ")
    with conn.begin():
        now = conn.execute(select(func.now())).scalar_one()
        open_count, head_id, oldest_open = queue_figures.head_summary(conn)
        todo_count, oldest_todo = queue_figures.backfill_summary(conn)
        dead, oldest_dead = overview.waiting_dead_letters(conn, DEAD_LETTERS_LISTED)
        dead_event_ids = outbox.dead_event_ids(conn)
        position = registration.intake_position(conn).accounted_for if mailbox is not None else 0
        f = Figures(
            now=now, open_messages=open_count, head_id=head_id, oldest_open_at=oldest_open,
            by_status_reason=queue_figures.reason_counts(conn), dead=dead,
            backfill_pending=todo_count, oldest_backfill_at=oldest_todo,
            unsent_by_topic=outbox.unsent_by_topic(conn), oldest_unsent_at=outbox.oldest_unsent_released_at(conn),
            dead_events=len(dead_event_ids),
            requests=requests.status_counts(conn), request_outcomes=requests.latest_outcomes(conn),
            unsupported_recent=monitoring.waiting_unsupported_types(conn, now - UNSUPPORTED_WINDOW),
            pump_lock_held=monitoring.advisory_lock_held(conn, locks.PUMP),
            heartbeats=monitoring.heartbeats(conn), alerts=monitoring.alert_states(conn),
            dead_letters=tuple(oldest_dead), dead_ids=tuple(monitoring.waiting_dead_ids(conn, ALERT_IDS_CAP)),
            dead_event_ids=tuple(dead_event_ids[:ALERT_IDS_CAP]), stand_mapping=mapping_status(conn),
            stop=cutover_state.stop(conn), kafka=kafka_status.read(conn))
    if mailbox is None:
        return f
    return replace(f, mailbox=read_mailbox(mailbox, position))


def figures(engine: Engine, mailbox: Mailbox | None = None) -> Figures:
    with engine.connect() as conn:
        return read_figures(conn, mailbox)


# --- the mailbox read --------------------------------------------------------------------------------
def as_instant(wall: datetime) -> datetime:
    """A mailbox DATETIME (naive, this host's local wall time: how msgx writes them) as an instant."""
    return wall.astimezone() if wall.tzinfo is None else wall


# per mailbox: a read that has not returned yet (the thread holds its mailbox, so the key lives as long)
_in_flight: weakref.WeakKeyDictionary[Mailbox, threading.Thread] = weakref.WeakKeyDictionary()
_in_flight_lock = threading.Lock()


def read_mailbox(mailbox: Mailbox, after_id: int, *, timeout_s: float = MAILBOX_TIMEOUT_S) -> MailboxSide:
    """The unregistered rows above ``after_id``, within ``timeout_s``; never raises.

    The read runs in a daemon thread so a mailbox that hangs (a stopped server, a dropped network)
    costs the caller ``timeout_s``, not the driver's own timeouts. While such a read has not
    returned, the next call reports the mailbox down at once instead of piling up another."""
    result: list[MailboxSide] = []

    def read() -> None:
        try:
            count, oldest, stamped = mailbox.unseen_rows(after_id, UNREGISTERED_CAP)
            result.append(MailboxSide(True, count, as_instant(oldest) if oldest is not None else None,
                                      unstamped=stamped < count))
        except Exception as exc:  # noqa: BLE001 - any failure of the read means "the mailbox did not answer"
            first_line = (str(exc).strip().splitlines() or [""])[0]
            result.append(MailboxSide(False, error=f"{exc.__class__.__name__}: {safe_text(first_line, 200)}"))

    with _in_flight_lock:
        previous = _in_flight.get(mailbox)
        if previous is not None and previous.is_alive():
            return MailboxSide(False, error="the previous mailbox read has not returned yet")
        thread = threading.Thread(target=read, name="msgx-monitor-mailbox", daemon=True)
        _in_flight[mailbox] = thread
        thread.start()
    thread.join(timeout_s)
    if not result:
        return MailboxSide(False, error=f"the mailbox did not answer within {timeout_s:.0f} s")
    with _in_flight_lock:
        if _in_flight.get(mailbox) is thread:
            del _in_flight[mailbox]
    return result[0]
