"""Read-only queries behind ``msgx status``: the parts of the operator's one-screen overview that
the monitor's figures do not already carry (the outbox per topic, the dead letters themselves, the
newest snapshot of each live day).

Each is one statement over a partial index or a table archiving keeps small, so the overview costs
the same on a busy day as on a quiet one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime

from sqlalchemy import Connection, Integer, cast, func, select
from sqlalchemy.dialects.postgresql import JSONB

from msgx_engine.store.status import REPLAYABLE_DEAD
from msgx_engine.store.tables import IS_WAITING_DEAD, msg_event, proc_state, schd_gen_run

ERROR_EXCERPT_CHARS = 240      # read; the check's text cuts it again, between words (monitor.checks.excerpt)


@dataclass(frozen=True)
class TopicBacklog:
    """One logical topic's delivery state: released events not yet delivered, the oldest of them,
    and events given up after their delivery attempts."""

    topic: str
    undelivered: int
    oldest_released_at: datetime | None
    dead: int


def outbox_by_topic(conn: Connection) -> list[TopicBacklog]:
    """Every topic with something undelivered or dead (delivered events are not counted: the
    statement reads only rows without ``sent_at``)."""
    c = msg_event.c
    live = (c.released_at.is_not(None)) & c.dead_at.is_(None)
    rows = conn.execute(
        select(c.topic,
               func.count().filter(live),
               func.min(c.released_at).filter(live),
               func.count().filter(c.dead_at.is_not(None)))
        .where(c.sent_at.is_(None)).group_by(c.topic).order_by(c.topic))
    return [TopicBacklog(topic, int(n), oldest, int(dead)) for topic, n, oldest, dead in rows]


@dataclass(frozen=True)
class DeadLetter:
    """A DEAD message no operator has acknowledged yet."""

    msg_id: int
    msg_type: str | None
    msg_styp: str | None
    reason: str | None
    error_class: str | None
    error_excerpt: str | None
    registered_at: datetime
    dead_at: datetime | None

    @property
    def replayable(self) -> bool:
        """A replay fixes it once its cause is gone; only the others are for ``msgx acknowledge``."""
        return self.reason in REPLAYABLE_DEAD


def waiting_dead_letters(conn: Connection, limit: int = 20) -> tuple[int, list[DeadLetter]]:
    """How many DEAD messages wait for an operator, and the ``limit`` oldest of them (by mailbox id:
    the order they arrived in). Acknowledged ones have been dealt with and are left out."""
    ps = proc_state.c
    total = int(conn.execute(select(func.count()).where(*IS_WAITING_DEAD)).scalar_one())
    rows = conn.execute(
        select(ps.msg_id, ps.msg_type, ps.msg_styp, ps.reason, ps.error_class,
               func.left(func.regexp_replace(ps.error_detail, r"\s+", " ", "g"), ERROR_EXCERPT_CHARS),
               ps.created_at, ps.terminal_at)
        .where(*IS_WAITING_DEAD).order_by(ps.msg_id).limit(limit))
    return total, [DeadLetter(*r) for r in rows]


@dataclass(frozen=True)
class SnapshotRun:
    """The newest accepted snapshot of one operating day (``schd_gen_run``)."""

    day: date
    msg_id: int
    styp: str
    version: int
    flights: int
    written: int
    deleted: int
    kept_later: int
    at: datetime
    differing: int | None        # flights msgx held whose state the snapshot changed (its reconciliation)


def latest_snapshots(conn: Connection, since: date) -> list[SnapshotRun]:
    """The newest snapshot of every day from ``since`` on, oldest day first."""
    c = schd_gen_run.c
    newest = (select(c.fday, func.max(c.msg_id).label("msg_id")).where(c.fday >= since)
              .group_by(c.fday).subquery())
    # the reconciliation's headline: flights msgx held whose state the snapshot changed
    differing = cast(cast(c.report, JSONB)["differing"].astext, Integer)
    rows = conn.execute(
        select(c.fday, c.msg_id, c.styp, c.version, c.flights, c.written, c.deleted, c.kept_later, c.created_at,
               differing)
        .join(newest, (newest.c.fday == c.fday) & (newest.c.msg_id == c.msg_id)).order_by(c.fday))
    return [SnapshotRun(*r) for r in rows]
