"""The monitor's figures: one read-only snapshot of PostgreSQL that both ``/metrics`` and the
health checks are computed from, so a scrape and an alert never disagree about the same moment.

Each figure is one aggregate over a partial index or a table archiving keeps small (``proc_state``,
``backfill_todo``, ``msg_event``, ``req_track``, the monitor's own tables): a handful of cheap
statements per call, whatever the traffic. Ages are measured against the database's clock, the
same clock that stamped the rows. Nothing here reads the mailbox, Redis or Kafka: any instance
reports the same truth, and a scrape never waits for a server other than its own database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import Connection, Engine, func, select

from msgx_engine.store import locks, monitoring, outbox, queue, requests
from msgx_engine.store.monitoring import AlertState, Heartbeat
from msgx_engine.store.status import Status

UNSUPPORTED_WINDOW = timedelta(hours=1)   # an unknown type seen this recently keeps its check failing


@dataclass(frozen=True)
class Figures:
    now: datetime
    open_messages: int
    head_id: int | None
    oldest_open_at: datetime | None
    by_status_reason: list[tuple[str, str | None, int]]
    dead: int
    backfill_pending: int
    oldest_backfill_at: datetime | None
    unsent_by_topic: dict[str, int]
    oldest_unsent_at: datetime | None
    dead_events: int
    requests: list[tuple[str, str, int]]                     # (rtype, status, count)
    request_outcomes: list[tuple[str, str, str, int]]        # newest outcome per (rtype, styp)
    unsupported_recent: list[tuple[str, int]]                # TYPE-STYP skipped as unsupported lately
    pump_lock_held: bool
    heartbeats: list[Heartbeat] = field(default_factory=list)
    alerts: dict[str, AlertState] = field(default_factory=dict)

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

    def heartbeat(self, component: str) -> Heartbeat | None:
        return next((h for h in self.heartbeats if h.component == component), None)


def read_figures(conn: Connection) -> Figures:
    """Every figure in one REPEATABLE READ snapshot (the caller's connection, not yet in a transaction)."""
    conn.execution_options(isolation_level="REPEATABLE READ")
    with conn.begin():
        now = conn.execute(select(func.now())).scalar_one()
        open_count, head_id, oldest_open = queue.head_summary(conn)
        todo_count, oldest_todo = queue.backfill_summary(conn)
        return Figures(
            now=now, open_messages=open_count, head_id=head_id, oldest_open_at=oldest_open,
            by_status_reason=queue.reason_counts(conn), dead=queue.dead_count(conn),
            backfill_pending=todo_count, oldest_backfill_at=oldest_todo,
            unsent_by_topic=outbox.unsent_by_topic(conn), oldest_unsent_at=outbox.oldest_unsent_released_at(conn),
            dead_events=outbox.dead_count(conn),
            requests=requests.status_counts(conn), request_outcomes=requests.latest_outcomes(conn),
            unsupported_recent=queue.recent_types_with(conn, Status.SKIPPED, "unsupported",
                                                       now - UNSUPPORTED_WINDOW),
            pump_lock_held=monitoring.advisory_lock_held(conn, locks.PUMP),
            heartbeats=monitoring.heartbeats(conn), alerts=monitoring.alert_states(conn))


def figures(engine: Engine) -> Figures:
    with engine.connect() as conn:
        return read_figures(conn)
