"""Outbox reads and marks for the dispatcher (US-07 AC1-AC3).

Only released events (``released_at`` set in transaction 2) are ever sent, in ``event_id`` order
per logical topic. A topic's head in backoff is not overtaken: ``due_prefix`` returns the run of
events from the head up to the first one whose ``next_send_at`` lies in the future. An event is
marked sent only after its delivery report; a failed one backs off, stays visible with its error
and turns DEAD after ``max_attempts`` with an alert.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, Float, Integer, bindparam, case, cast, func, literal, select, update

from msgx_engine.store.tables import msg_event

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OutboxEvent:
    event_id: int
    msg_id: int
    flid: str
    kind: str
    state_version: int
    payload: str


@dataclass(frozen=True)
class SendPolicy:
    """Per-event retry policy: backoff base·2^(n-1) seconds capped, DEAD after ``max_attempts``."""

    backoff_base_s: float = 1.0
    backoff_cap_s: float = 60.0
    max_attempts: int = 30   # ≈25 min of a dead broker before an event is dead-lettered


_unsent = (msg_event.c.released_at.is_not(None), msg_event.c.sent_at.is_(None), msg_event.c.dead_at.is_(None))


def due_prefix(conn: Connection, topic: str, now: datetime, limit: int) -> list[OutboxEvent]:
    """Unsent released events of ``topic`` from the head, stopping before the first one in backoff."""
    rows = conn.execute(
        select(msg_event.c.event_id, msg_event.c.msg_id, msg_event.c.flid, msg_event.c.kind,
               msg_event.c.state_version, msg_event.c.payload, msg_event.c.next_send_at)
        .where(msg_event.c.topic == topic, *_unsent).order_by(msg_event.c.event_id).limit(limit)).fetchall()
    out: list[OutboxEvent] = []
    for r in rows:
        if r.next_send_at is not None and r.next_send_at > now:
            break
        out.append(OutboxEvent(r.event_id, r.msg_id, r.flid, r.kind, r.state_version, r.payload))
    return out


def next_due_at(conn: Connection, topic: str) -> datetime | None:
    """When the head of ``topic`` may be tried again (None: no head, or due now)."""
    return conn.execute(select(msg_event.c.next_send_at).where(msg_event.c.topic == topic, *_unsent)
                        .order_by(msg_event.c.event_id).limit(1)).scalar()


def unsent_count(conn: Connection, topic: str | None = None) -> int:
    q = select(func.count()).select_from(msg_event).where(*_unsent)
    if topic is not None:
        q = q.where(msg_event.c.topic == topic)
    return int(conn.execute(q).scalar_one())


def oldest_unsent_released_at(conn: Connection) -> datetime | None:
    return conn.execute(select(func.min(msg_event.c.released_at)).where(*_unsent)).scalar()


def mark_sent(conn: Connection, event_ids: Sequence[int], now: datetime) -> int:
    """Record successful delivery; an event already marked (a concurrent resend) stays as it was."""
    if not event_ids:
        return 0
    res = conn.execute(update(msg_event).where(
        msg_event.c.event_id.in_(list(event_ids)),
        msg_event.c.sent_at.is_(None)).values(sent_at=now, send_error=None, next_send_at=None))
    return res.rowcount


def mark_failed(conn: Connection, failures: Sequence[tuple[int, str]], now: datetime,
                policy: SendPolicy) -> list[int]:
    """Count an attempt, back off, dead-letter at the limit (with an alert). Returns newly dead ids."""
    if not failures:
        return []
    attempts = msg_event.c.send_attempts + 1
    delay = func.least(literal(policy.backoff_base_s) * func.power(2, cast(msg_event.c.send_attempts, Float)),
                       literal(policy.backoff_cap_s))
    stmt = update(msg_event).where(msg_event.c.event_id == bindparam("b_event_id"),
                                   msg_event.c.sent_at.is_(None)).values(
        send_attempts=attempts,
        send_error=bindparam("b_error"),
        next_send_at=literal(now) + func.make_interval(0, 0, 0, 0, 0, 0, delay),
        dead_at=case((attempts >= cast(literal(policy.max_attempts), Integer), literal(now)), else_=None))
    conn.execute(stmt, [{"b_event_id": eid, "b_error": err[:2000]} for eid, err in failures])
    ids = [eid for eid, _ in failures]
    dead = [r[0] for r in conn.execute(select(msg_event.c.event_id).where(
        msg_event.c.event_id.in_(ids), msg_event.c.dead_at == now))]
    for eid in dead:
        log.error("ALERT dead event: msg_event %s not delivered after %s attempts (%s)", eid,
                  policy.max_attempts, dict(failures).get(eid))
    return dead


def revive_dead(conn: Connection, event_ids: Sequence[int] | None = None) -> int:
    """Operator action: give dead events (all, or the given ones) a fresh set of attempts."""
    q = update(msg_event).where(msg_event.c.dead_at.is_not(None), msg_event.c.sent_at.is_(None))
    if event_ids is not None:
        q = q.where(msg_event.c.event_id.in_(list(event_ids)))
    return conn.execute(q.values(dead_at=None, send_attempts=0, next_send_at=None)).rowcount


def unsent_count_upto(conn: Connection, topic: str, limit: int) -> int:
    """``min(unsent, limit)`` cheaply: the flush-by-size test runs every poll."""
    sub = select(msg_event.c.event_id).where(msg_event.c.topic == topic, *_unsent).limit(limit).subquery()
    return int(conn.execute(select(func.count()).select_from(sub)).scalar_one())


def dead_count(conn: Connection) -> int:
    return int(conn.execute(select(func.count()).select_from(msg_event)
                            .where(msg_event.c.dead_at.is_not(None), msg_event.c.sent_at.is_(None))).scalar_one())
