"""The outbox ``msg_event``: its rows, how they are written, released, read and marked (US-07, D12, one record per
change; D13, latest state per FLID).

Rows are ``OutboxRow``s built in one place (``change_events``, ``state_event``,
``tombstone_event``), written in transaction 1 (``insert``, one prebuilt statement) and released
with the message's terminal status in transaction 2 (``store.queue``'s guarded status write).

``msg``: one change notification per flight and message. ``schd``: the flight's whole state (or a
tombstone for a deleted flight).

Size: ``check_record_sizes`` refuses, before anything is written, a message whose
events would make a Kafka record larger than the configured limit; the pipeline then ends it
DEAD(oversize) instead of writing an event that no broker would take.

Dispatcher side: only released events (``released_at`` set in transaction 2) are ever sent, in ``event_id`` order
per logical topic. Order is promised per FLID (C-29), so a flight whose event is in backoff holds
back only its own later events: ``due_events`` leaves out every event of such a flight and returns
the other flights' events. An event is marked sent only after its delivery report; a failed one
backs off and stays visible with its error. Only an event the broker refuses (too large, not
authorized, a topic that cannot exist: ``SendFailure.refused``) turns DEAD, after ``max_attempts``,
with an alert; one that failed because the broker could not be reached waits for as long as the
outage lasts and goes out, in order, when the broker is back (decision F16, refusals make events DEAD). A dead
event keeps holding its flight's later events of the topic back until an operator revives it
(``revive_dead``, ``msgx outbox --apply``); it is then delivered first, so it is never overtaken.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import NamedTuple, overload

from sqlalchemy import Connection, Float, Integer, bindparam, case, cast, func, literal, select, union_all, update

from msgx_engine.sis.decode import Meta
from msgx_engine.state.model import FlightState
from msgx_engine.state.serialize import dumps, state_document, state_json, tombstone_json
from msgx_engine.store import bulk, metric_totals
from msgx_engine.store.tables import msg_event, msg_event_archive

log = logging.getLogger(__name__)

TOPIC_MSG = "msg"      # logical topics; the Kafka topic names are configured (MSGX_TOPIC_*)
TOPIC_SCHD = "schd"


# --- rows (transaction 1) ---------------------------------------------------------------------
@dataclass(frozen=True)
class OutboxRow:
    """One ``msg_event`` row as transaction 1 writes it (not yet released)."""

    msg_id: int
    flid: str
    topic: str          # TOPIC_MSG | TOPIC_SCHD
    kind: str           # change | state | tombstone
    state_version: int
    payload: str


_ROW_COLUMNS = tuple(f.name for f in fields(OutboxRow))
assert _ROW_COLUMNS == ("msg_id", "flid", "topic", "kind", "state_version", "payload")   # insert's tuples
_RELEASED_COLUMNS = (*_ROW_COLUMNS, "released_at")
# Plain SQL built once, sent with ``exec_driver_sql`` (no statement construction per message).
_INSERT_SQL = {False: bulk.insert_sql("msg_event", _ROW_COLUMNS), True: bulk.insert_sql("msg_event", _RELEASED_COLUMNS)}


def insert(conn: Connection, rows: Sequence[OutboxRow], *, released_at: datetime | None = None,
           limit: int | None = None) -> None:
    """Write ``rows`` in one statement (store/bulk.py; a snapshot's thousands by COPY), event ids
    in row order: unreleased, or released at ``released_at`` when transaction 2 commits with
    transaction 1 (P8, folded transactions), whose terminal status write would otherwise rewrite every row it just
    wrote to release it (10,000 for a snapshot, decision P25, events released at write).

    ``limit``: each row is checked against the Kafka record limit as it is written
    (``check_record_sizes``), and RecordTooLarge aborts the statement; the caller's rollback then
    undoes the transaction. Rows a snapshot builds while they are written (``StateEvents``) are
    checked this way, so that each is built once (P29, rows built while COPY sends)."""
    if not rows:
        return
    released = released_at is not None
    columns = _RELEASED_COLUMNS if released else _ROW_COLUMNS
    tail = (released_at,) if released else ()
    values = ((r.msg_id, r.flid, r.topic, r.kind, r.state_version, r.payload, *tail)
              for r in (rows if limit is None else _checked(rows, limit)))
    binary = released_at is None or released_at.tzinfo is not None     # every value of its column's type (P31, binary
                                                                       # COPY and FLID arrays)
    if len(rows) < bulk.COPY_MIN_ROWS or not bulk.copy_rows(conn, "msg_event", columns, values, binary=binary):
        conn.exec_driver_sql(_INSERT_SQL[released], bulk.rows_param([dict(zip(columns, v, strict=True))
                                                                     for v in values]))


# A Kafka record is its key, its value and the headers (event_id, state_version, msg_id) plus the
# record framing; this allowance covers the headers and framing with room to spare.
RECORD_OVERHEAD_BYTES = 512


def record_bytes(row: OutboxRow) -> int:
    """The size of the Kafka record ``row`` becomes, uncompressed (what the producer's limit counts)."""
    return utf8_len(row.payload) + utf8_len(row.flid) + RECORD_OVERHEAD_BYTES


def utf8_len(text: str) -> int:
    """The UTF-8 length of ``text``, without encoding it when it is ASCII (a flag CPython keeps):
    a snapshot sizes 10,000 documents of about 1.5 kB, and the dispatcher each array it packs."""
    return len(text) if text.isascii() else len(text.encode())


class RecordTooLarge(Exception):
    """A message would write an event larger than the Kafka record limit (DEAD(oversize))."""


def check_record_sizes(rows: Iterable[OutboxRow], limit: int) -> None:
    """Raise RecordTooLarge for the first row whose record would exceed ``limit`` bytes (pure)."""
    for _ in _checked(rows, limit):
        pass


def _checked(rows: Iterable[OutboxRow], limit: int) -> Iterator[OutboxRow]:
    """``rows``, each passed on once it is known to fit the limit."""
    for row in rows:
        size = record_bytes(row)
        if size > limit:
            raise RecordTooLarge(f"flight {row.flid}: {row.topic} record of {size} bytes exceeds the Kafka record "
                                 f"limit of {limit} bytes (MSGX_KAFKA_MAX_RECORD_BYTES)")
        yield row


def state_event(msg_id: int, state: FlightState) -> OutboxRow:
    """The ``schd`` event of a written state: its whole state, or a tombstone when deleted."""
    if state.deleted:
        return tombstone_event(msg_id, state.flid, state.state_version)
    return OutboxRow(msg_id, state.flid, TOPIC_SCHD, "state", state.state_version, state_json(state))


class StateEvents(Sequence[OutboxRow]):
    """The ``schd`` rows of a snapshot's written states (``state_event`` of each, then the
    tombstones), each built when it is read. ``insert`` writes them by COPY as it reads them: the
    server stores each row while the next document is serialized, where a list built first left
    the pump waiting for the server at the end of the COPY (P29: 10,000 documents)."""

    def __init__(self, msg_id: int, states: Sequence[FlightState], tail: Sequence[OutboxRow] = ()) -> None:
        self._msg_id = msg_id
        self._states = states
        self._tail = tail

    def __len__(self) -> int:
        return len(self._states) + len(self._tail)

    @overload
    def __getitem__(self, index: int) -> OutboxRow: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[OutboxRow]: ...

    def __getitem__(self, index: int | slice) -> OutboxRow | Sequence[OutboxRow]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        n = len(self._states)
        return state_event(self._msg_id, self._states[index]) if index < n else self._tail[index - n]

    def __iter__(self) -> Iterator[OutboxRow]:
        msg_id = self._msg_id
        for state in self._states:
            yield state_event(msg_id, state)
        yield from self._tail


def tombstone_event(msg_id: int, flid: str, state_version: int) -> OutboxRow:
    return OutboxRow(msg_id, flid, TOPIC_SCHD, "tombstone", state_version, tombstone_json(flid, state_version))


def change_payload(msg_id: int, meta: Meta, state: FlightState, changed: Iterable[str],
                   cleared: Iterable[str], document: dict[str, object] | None = None) -> str:
    """The ``msg`` notification: the changed keys with their published values (null when cleared),
    taken from the whole-state document, so derived keys (PSDT ``ABDG``, ``STND_ABDG``) appear too."""
    whole = document if document is not None else state_document(state)
    changes = {key: whole.get(key) for key in sorted(set(changed) | set(cleared))}
    doc = {"CHANGES": changes, "DELETED": state.deleted, "FLID": state.flid, "MSG_ID": msg_id,
           "SEQN": meta.seqn, "SNDR": meta.sndr, "STATE_VERSION": state.state_version,
           "STYP": meta.styp, "TYPE": meta.type}
    return dumps(doc)


def change_events(msg_id: int, meta: Meta, state: FlightState, changed: Iterable[str],
                  cleared: Iterable[str]) -> list[OutboxRow]:
    """A dynamic message's two events per changed flight (FS §5.5): the ``msg`` change
    notification and the ``schd`` whole state (or tombstone)."""
    document = state_document(state)
    change = OutboxRow(msg_id, state.flid, TOPIC_MSG, "change", state.state_version,
                       change_payload(msg_id, meta, state, changed, cleared, document))
    if state.deleted:
        return [change, tombstone_event(msg_id, state.flid, state.state_version)]
    return [change, OutboxRow(msg_id, state.flid, TOPIC_SCHD, "state", state.state_version, dumps(document))]


# --- dispatcher (reads and marks) -------------------------------------------------------------

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
    """Per-event retry policy: backoff base·2^(n-1) seconds capped; an event the broker refuses is
    DEAD once it has had ``max_attempts``; one the broker did not answer for never is (F16)."""

    backoff_base_s: float = 1.0
    backoff_cap_s: float = 60.0
    max_attempts: int = 30   # a refused record's attempts (≈25 min of backoff) before it is dead-lettered


class SendFailure(NamedTuple):
    """One event's failed attempt: ``refused`` when the broker (or the producer) turned its record
    down for what it is; False when the broker was not reached (timeout, unreachable, producer rebuilt)."""

    event_id: int
    error: str
    refused: bool = False


_unsent = (msg_event.c.released_at.is_not(None), msg_event.c.sent_at.is_(None), msg_event.c.dead_at.is_(None))


def due_events(conn: Connection, topic: str, now: datetime, limit: int, *,
               dead: Collection[int]) -> list[OutboxEvent]:
    """Unsent released events of ``topic`` in ``event_id`` order, without any event of a flight that
    has an unsent event in backoff or a dead event: that flight's later events wait behind it
    (per-FLID order, C-29) until it is delivered, or revived by an operator and then delivered
    first; every other flight's events go (one undeliverable record never holds back the topic).

    ``dead``: the ids of events the caller knows to be dead (``dead_event_ids`` when it starts, plus
    those ``mark_failed`` dead-letters since). Dead events are outside the unsent index, so they are
    looked up by primary key here rather than found by a scan on every poll; an id revived since
    no longer holds its flight back."""
    c = msg_event.c
    backoff = select(c.flid).where(c.topic == topic, *_unsent, c.next_send_at > now)
    waiting = backoff if not dead else backoff.union_all(select(c.flid).where(
        c.event_id.in_(list(dead)), c.topic == topic, c.dead_at.is_not(None), c.sent_at.is_(None)))
    rows = conn.execute(
        select(c.event_id, c.msg_id, c.flid, c.kind, c.state_version, c.payload)
        .where(c.topic == topic, *_unsent, c.flid.not_in(waiting)).order_by(c.event_id).limit(limit)).fetchall()
    return [OutboxEvent(r.event_id, r.msg_id, r.flid, r.kind, r.state_version, r.payload) for r in rows]


def unsent_count(conn: Connection, topic: str | None = None) -> int:
    q = select(func.count()).select_from(msg_event).where(*_unsent)
    if topic is not None:
        q = q.where(msg_event.c.topic == topic)
    return int(conn.execute(q).scalar_one())


def unsent_by_topic(conn: Connection) -> dict[str, int]:
    """Released, undelivered, not dead events per logical topic (``msg``, ``schd``)."""
    rows = conn.execute(select(msg_event.c.topic, func.count()).where(*_unsent).group_by(msg_event.c.topic))
    return {r[0]: int(r[1]) for r in rows}


def oldest_unsent_released_at(conn: Connection) -> datetime | None:
    return conn.execute(select(func.min(msg_event.c.released_at)).where(*_unsent)).scalar()


# The delivered mark and, in the same statement, the durable delivered totals of the events it
# marked (``store.metric_totals``): counted once, by the transaction that records the delivery.
_MARK_SENT_SQL = (
    "WITH s AS (UPDATE msg_event SET sent_at = %(now)s, send_error = NULL, next_send_at = NULL "
    "WHERE event_id = ANY(%(ids)s) AND sent_at IS NULL RETURNING topic, released_at), "
    f"{metric_totals.delivered_cte('s')} SELECT count(*) FROM s")


def mark_sent(conn: Connection, event_ids: Sequence[int], now: datetime) -> int:
    """Record successful delivery (``now``: when Kafka acknowledged it); an event already marked
    (a concurrent resend) stays as it was and is not counted again."""
    if not event_ids:
        return 0
    return int(conn.exec_driver_sql(_MARK_SENT_SQL, {"ids": sorted(event_ids), "now": now}).scalar_one())


def mark_failed(conn: Connection, failures: Sequence[SendFailure], now: datetime,
                policy: SendPolicy) -> list[int]:
    """Count an attempt and back off; an event the broker refused is dead-lettered once it has had
    ``max_attempts`` (with an alert), one the broker was not reached for never is. Returns newly dead ids."""
    if not failures:
        return []
    attempts = msg_event.c.send_attempts + 1
    delay = func.least(literal(policy.backoff_base_s) * func.power(2, cast(msg_event.c.send_attempts, Float)),
                       literal(policy.backoff_cap_s))
    gives_up = bindparam("b_refused") & (attempts >= cast(literal(policy.max_attempts), Integer))
    stmt = update(msg_event).where(msg_event.c.event_id == bindparam("b_event_id"),
                                   msg_event.c.sent_at.is_(None)).values(
        send_attempts=attempts,
        send_error=bindparam("b_error"),
        next_send_at=literal(now) + func.make_interval(0, 0, 0, 0, 0, 0, delay),
        dead_at=case((gives_up, literal(now)), else_=None))
    conn.execute(stmt, [{"b_event_id": f.event_id, "b_error": f.error[:2000], "b_refused": f.refused}
                        for f in failures])
    refused = [f.event_id for f in failures if f.refused]
    dead = [r[0] for r in conn.execute(select(msg_event.c.event_id).where(
        msg_event.c.event_id.in_(refused), msg_event.c.dead_at == now))] if refused else []
    why = {f.event_id: f.error for f in failures}
    for eid in dead:
        log.error("ALERT dead event: msg_event %s refused by Kafka after %s attempts (%s)", eid,
                  policy.max_attempts, why.get(eid))
    return dead


def revive_dead(conn: Connection, event_ids: Sequence[int] | None = None) -> list[int]:
    """Operator action (``msgx outbox --apply``): give dead events (all, or the given ones) a fresh
    set of attempts, due at once. The last error stays for the record. Each one is still the oldest
    unsent event of its flight and topic (``due_events`` held the flight's later events back while
    it was dead), so it is delivered first. Returns the revived ids in order."""
    q = update(msg_event).where(msg_event.c.dead_at.is_not(None), msg_event.c.sent_at.is_(None))
    if event_ids is not None:
        q = q.where(msg_event.c.event_id.in_(list(event_ids)))
    rows = conn.execute(q.values(dead_at=None, send_attempts=0, next_send_at=None).returning(msg_event.c.event_id))
    return sorted(r[0] for r in rows)


def dead_event_ids(conn: Connection) -> list[int]:
    """Every dead, undelivered event (a scan: dead events are outside the unsent index; a
    dispatcher reads this once when it starts)."""
    return [r[0] for r in conn.execute(select(msg_event.c.event_id).where(
        msg_event.c.dead_at.is_not(None), msg_event.c.sent_at.is_(None)).order_by(msg_event.c.event_id))]


@dataclass(frozen=True)
class DeadEvent:
    """A dead outbox event as an operator sees it (``msgx outbox``)."""

    event_id: int
    topic: str
    flid: str
    msg_id: int
    kind: str
    attempts: int
    error: str | None
    released_at: datetime | None
    dead_at: datetime
    held_behind: int        # later undelivered events of the same flight and topic waiting behind it


def dead_events(conn: Connection, event_ids: Sequence[int] | None = None, *, limit: int = 1000,
                for_update: bool = False) -> list[DeadEvent]:
    """Dead, undelivered events in ``event_id`` order (all, or among ``event_ids``), each with how
    many later events of its flight wait behind it."""
    e = msg_event.alias("e")
    later = msg_event.alias("l")
    held = (select(func.count()).where(later.c.topic == e.c.topic, later.c.flid == e.c.flid,
                                       later.c.event_id > e.c.event_id, later.c.released_at.is_not(None),
                                       later.c.sent_at.is_(None), later.c.dead_at.is_(None))
            .scalar_subquery())
    q = (select(e.c.event_id, e.c.topic, e.c.flid, e.c.msg_id, e.c.kind, e.c.send_attempts, e.c.send_error,
                e.c.released_at, e.c.dead_at, held)
         .where(e.c.dead_at.is_not(None), e.c.sent_at.is_(None)).order_by(e.c.event_id).limit(limit))
    if event_ids is not None:
        q = q.where(e.c.event_id.in_(list(event_ids)))
    if for_update:
        q = q.with_for_update(of=e)
    return [DeadEvent(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], int(r[9]))
            for r in conn.execute(q)]


def unsent_count_upto(conn: Connection, topic: str, limit: int) -> int:
    """``min(unsent, limit)`` cheaply: the flush-by-size test runs every poll."""
    sub = select(msg_event.c.event_id).where(msg_event.c.topic == topic, *_unsent).limit(limit).subquery()
    return int(conn.execute(select(func.count()).select_from(sub)).scalar_one())


def dead_count(conn: Connection) -> int:
    return int(conn.execute(select(func.count()).select_from(msg_event)
                            .where(msg_event.c.dead_at.is_not(None), msg_event.c.sent_at.is_(None))).scalar_one())


def flids_of(conn: Connection, msg_id: int) -> list[str]:
    """The flights a message's events touched (a resumed message's post-commit step reloads them)."""
    return [r[0] for r in conn.execute(select(msg_event.c.flid).where(msg_event.c.msg_id == msg_id).distinct())]


# --- what an operator sees (replay preview) ------------------------------------------------------
@dataclass(frozen=True)
class EventSummary:
    """A message's outbox events: how many, released, delivered, dead-lettered."""

    total: int = 0
    released: int = 0
    sent: int = 0
    dead: int = 0


def event_summaries(conn: Connection, msg_ids: Sequence[int]) -> dict[int, EventSummary]:
    if not msg_ids:
        return {}
    c = msg_event.c
    rows = conn.execute(select(c.msg_id, func.count(), func.count(c.released_at), func.count(c.sent_at),
                               func.count(c.dead_at)).where(c.msg_id.in_(list(msg_ids))).group_by(c.msg_id))
    return {r[0]: EventSummary(*r[1:]) for r in rows}


@dataclass(frozen=True)
class FlightTrail:
    """A flight's outbox trail around one message in mailbox order, archived events included: the
    state version the message saw (the newest one written by a smaller mailbox id; 0 when none)
    and the later messages (larger ids) that have changed the flight since."""

    seen_version: int = 0
    later_messages: int = 0
    last_later_msg_id: int | None = None


def flight_trails(conn: Connection, msg_id: int, flids: Sequence[str]) -> dict[str, FlightTrail]:
    """``FlightTrail`` of each of ``flids`` around ``msg_id`` (one statement)."""
    if not flids:
        return {}
    both = union_all(*[select(t.c.flid, t.c.msg_id, t.c.state_version).where(t.c.flid.in_(list(flids)))
                       for t in (msg_event, msg_event_archive)]).subquery()
    c = both.c
    rows = conn.execute(select(
        c.flid,
        func.coalesce(func.max(c.state_version).filter(c.msg_id < msg_id), 0),
        func.count(func.distinct(c.msg_id)).filter(c.msg_id > msg_id),
        func.max(c.msg_id).filter(c.msg_id > msg_id)).group_by(c.flid))
    return {r[0]: FlightTrail(int(r[1]), int(r[2]), r[3]) for r in rows}
