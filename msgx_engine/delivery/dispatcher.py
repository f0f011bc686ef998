"""The dispatcher: released outbox events to Kafka topics ``msg`` and ``schd`` (US-07, D12-D14).

``msg``: one record per change event, in ``event_id`` order, key FLID, headers ``event_id``,
``state_version``, ``msg_id``; marked sent only on its own delivery report (INV-10: at least
once; C-29: per-FLID order, since one key always lands in one partition and the producer keeps
partition order). ``schd``: every ``schd_flush_s`` (3 s) or ``schd_batch`` (500) events, one
record per FLID carrying the newest whole state or tombstone of the batch; on success every
event of that FLID in the batch is marked (FS §8: intermediate versions are not resent).
``MSGX_SCHD_FORMAT=array`` (the legacy consumers' mode of D13, latest state per FLID) sends the same
latest documents of a flush as one JSON array instead, key ``schd`` (one partition, so flushes
stay in order), split into several arrays only where one would exceed ``ARRAY_MAX_BYTES``.

Order is promised per FLID only (C-29): a flight whose event failed waits, with its later
events, for that event's backoff; every other flight's events keep flowing. A
dead event goes on holding its flight's later events of the topic back until an operator revives
it (``msgx outbox --apply``); revived, it is the oldest of its flight and goes first, so it is
never overtaken.

Between rounds with nothing due it pauses ``poll_s``; the pump's inline dispatcher is woken
instead the moment the pump commits released events (``wake``), so a record does not wait out a
poll (the speed targets' latency target). A dispatcher in a process of its own listens for the pump's
announcement of each release (``store.release_signal``, P19, release NOTIFY) and is woken the same way.

One dispatcher at a time: it holds a PostgreSQL session advisory lock on the connection it
works with for its whole life (key differs from the pump's), so a lost connection loses the lock
and its marks together. Resends after a crash reuse the outbox ``event_id``: consumers dedupe on it.

Nothing is published while the cut-over record says this installation stopped writes or a rollback
to it is in progress (``cutover_state.DeliveryRight``): read when the dispatcher starts (it exits as
busy) and at most every second while it runs (it stops).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from msgx_engine import faults
from msgx_engine.clock import Clock
from msgx_engine.config import SCHD_ARRAY, SCHD_RECORDS
from msgx_engine.db import is_disconnect
from msgx_engine.delivery.producer import KafkaSink, Record, SendResult
from msgx_engine.redact import safe_text
from msgx_engine.store import kafka_status, locks, outbox
from msgx_engine.store.cutover_state import DeliveryRight, WritesStopped
from msgx_engine.store.outbox import TOPIC_MSG, TOPIC_SCHD, OutboxEvent, SendFailure, SendPolicy
from msgx_engine.store.release_signal import ReleaseListener
from msgx_engine.store.session_lock import SessionLock

log = logging.getLogger(__name__)



class DispatcherBusy(RuntimeError):
    """Another dispatcher holds the dispatch lock."""


ARRAY_KEY = "schd"
ARRAY_MAX_BYTES = 900_000   # under the Kafka default message.max.bytes (1 MB) with room for headers


@dataclass
class DispatchOptions:
    run_for_s: float = 0.0           # 0: drain (exit when nothing is due); else loop this long
    poll_s: float = 0.1              # pause when nothing is due; ``wake`` ends it early (inline beside the pump)
    schd_flush_s: float = 3.0
    schd_batch: int = 500
    msg_batch: int = 500
    heartbeat_s: float = 10.0
    schd_format: str = SCHD_RECORDS
    reconnect_for_s: float = 60.0
    policy: SendPolicy = field(default_factory=SendPolicy)
    listen: bool = True              # a looping dispatcher LISTENs for the pump's releases (P19); the inline one
                                     # is woken in process instead


@dataclass
class DispatchSummary:
    msg_sent: int = 0
    schd_records: int = 0
    schd_events: int = 0
    failed: int = 0
    dead: int = 0
    producer_rebuilds: int = 0
    reconnects: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def as_metadata(self) -> dict[str, float | int]:
        return {"msg_sent": self.msg_sent, "schd_records": self.schd_records, "schd_events": self.schd_events,
                "failed_attempts": self.failed, "dead": self.dead, "producer_rebuilds": self.producer_rebuilds,
                "reconnects": self.reconnects, "elapsed_s": round(self.elapsed_s, 3)}


def headers_for(ev: OutboxEvent) -> tuple[tuple[str, str], ...]:
    return (("event_id", str(ev.event_id)), ("state_version", str(ev.state_version)), ("msg_id", str(ev.msg_id)))


def latest_per_flid(events: Sequence[OutboxEvent]) -> dict[str, list[OutboxEvent]]:
    """Group a ``schd`` batch by FLID, oldest first; the last of each group is what gets sent."""
    groups: dict[str, list[OutboxEvent]] = {}
    for ev in sorted(events, key=lambda e: e.event_id):
        groups.setdefault(ev.flid, []).append(ev)
    return groups


def schd_batches(groups: dict[str, list[OutboxEvent]], topic: str, schd_format: str = SCHD_RECORDS, *,
                 max_bytes: int = ARRAY_MAX_BYTES) -> list[tuple[Record, list[int]]]:
    """The records of one ``schd`` flush, each with the event ids its delivery marks sent.

    ``records``: one per FLID, its latest document, key FLID. ``array``: the latest documents of
    all FLIDs (FLIDs in order of first appearance) as JSON arrays of at most ``max_bytes`` (one array unless that is
    exceeded; a single document is never split), key ``ARRAY_KEY``, headers ``event_id`` (the
    newest event in the array) and ``count``.
    """
    latest = [group[-1] for group in groups.values()]
    if schd_format != SCHD_ARRAY:
        return [(Record(topic, ev.flid, ev.payload, ev.event_id, headers_for(ev)),
                 [e.event_id for e in groups[ev.flid]]) for ev in latest]
    chunks: list[list[OutboxEvent]] = [[]]
    size = 0
    for ev in latest:
        n = outbox.utf8_len(ev.payload) + 1
        if chunks[-1] and size + n > max_bytes:
            chunks.append([])
            size = 0
        chunks[-1].append(ev)
        size += n
    batches = []
    for chunk in chunks:
        last = chunk[-1].event_id
        value = "[" + ",".join(ev.payload for ev in chunk) + "]"
        headers = (("event_id", str(last)), ("count", str(len(chunk))))
        batches.append((Record(topic, ARRAY_KEY, value, last, headers),
                        [e.event_id for ev in chunk for e in groups[ev.flid]]))
    return batches


class Dispatcher:
    def __init__(self, engine: Engine, sink: KafkaSink, clock: Clock, *, topic_msg: str = "msg",
                 topic_schd: str = "schd", options: DispatchOptions | None = None,
                 on_heartbeat: Callable[[DispatchSummary], None] | None = None,
                 should_stop: Callable[[], bool] | None = None, wake: threading.Event | None = None) -> None:
        self.engine = engine
        self.sink = sink
        self.clock = clock
        self.topics = {TOPIC_MSG: topic_msg, TOPIC_SCHD: topic_schd}
        self.options = options or DispatchOptions()
        self.on_heartbeat = on_heartbeat
        self.should_stop = should_stop or (lambda: False)
        self.wake = wake or threading.Event()
        self.lock = SessionLock(engine, locks.DISPATCHER, "msgx dispatcher", DispatcherBusy)
        self.right = DeliveryRight(engine)       # a cut-over stopped writes here: publish nothing
        self.conn: Connection | None = None
        self._last_schd_flush = time.monotonic()
        self._dead: set[int] = set()     # dead events known to this dispatcher: their flights wait (revive)
        self._failing = True             # a stored send error may wait for this dispatcher's first delivery

    # --- loop ---------------------------------------------------------------------------------
    def run(self) -> DispatchSummary:
        summary = DispatchSummary()
        self.conn = self.lock.acquire()
        listens = self.options.listen and self.options.run_for_s > 0
        try:
            self.right.check(self.conn)
            self._load_dead()
            with ReleaseListener(self.engine, self.wake) if listens else nullcontext():
                self._loop(summary)
        except WritesStopped as exc:
            raise DispatcherBusy(str(exc)) from exc
        finally:
            summary.producer_rebuilds = self.sink.rebuilds
            self.sink.close()
            self.lock.release()
            self.conn = None
        return summary

    def _loop(self, summary: DispatchSummary) -> None:
        opts = self.options
        drain = opts.run_for_s <= 0
        last_beat = time.monotonic()
        while not self.should_stop() and not self.right.stopped_meanwhile():
            if not drain and summary.elapsed_s >= opts.run_for_s:
                break
            self.wake.clear()        # a release from here on ends the next pause at once
            try:
                busy = self.step(summary, force_schd=drain)
            except DBAPIError as exc:
                if not is_disconnect(exc):
                    raise
                log.warning("dispatcher lost the PostgreSQL connection: %s", exc.__class__.__name__)
                self.conn = self.lock.reacquire(opts.reconnect_for_s)
                self._load_dead()
                summary.reconnects += 1
                continue
            if self.on_heartbeat and time.monotonic() - last_beat >= opts.heartbeat_s:
                summary.producer_rebuilds = self.sink.rebuilds
                self.on_heartbeat(summary)
                last_beat = time.monotonic()
            if busy:
                continue
            if drain:
                break
            self.wake.wait(opts.poll_s)

    def step(self, summary: DispatchSummary, *, force_schd: bool = False) -> bool:
        """One round: the ``msg`` prefix that is due, then a ``schd`` flush when its time has come."""
        busy = self._send_msg(summary)
        if force_schd or self._schd_flush_due():
            busy = self._flush_schd(summary) or busy
        return busy

    # --- msg ------------------------------------------------------------------------------------
    def _send_msg(self, summary: DispatchSummary) -> bool:
        conn = self._conn()
        events = outbox.due_events(conn, TOPIC_MSG, self.clock.now(), self.options.msg_batch, dead=self._dead)
        conn.commit()
        if not events:
            return False
        topic = self.topics[TOPIC_MSG]
        records = [Record(topic, ev.flid, ev.payload, ev.event_id, headers_for(ev)) for ev in events]
        result = self.sink.send(records)
        faults.reach("dispatch_before_mark")
        sent = [events[i].event_id for i in result.delivered]
        failures = [SendFailure(events[i].event_id, err, i in result.refused) for i, err in result.failures()]
        dead = self._record(conn, sent, failures, result, summary)
        summary.msg_sent += len(sent)
        return bool(sent or dead)

    # --- schd -----------------------------------------------------------------------------------
    def _schd_flush_due(self) -> bool:
        if time.monotonic() - self._last_schd_flush >= self.options.schd_flush_s:
            return True
        conn = self._conn()
        n = outbox.unsent_count_upto(conn, TOPIC_SCHD, self.options.schd_batch)
        conn.commit()
        return n >= self.options.schd_batch

    def _flush_schd(self, summary: DispatchSummary) -> bool:
        conn = self._conn()
        events = outbox.due_events(conn, TOPIC_SCHD, self.clock.now(), self.options.schd_batch, dead=self._dead)
        conn.commit()
        self._last_schd_flush = time.monotonic()
        if not events:
            return False
        batches = schd_batches(latest_per_flid(events), self.topics[TOPIC_SCHD], self.options.schd_format)
        result = self.sink.send([record for record, _ in batches])
        faults.reach("dispatch_before_mark")
        sent = [eid for i in result.delivered for eid in batches[i][1]]
        failures = [SendFailure(eid, err, i in result.refused) for i, err in result.failures() for eid in batches[i][1]]
        summary.schd_records += len(result.delivered)
        dead = self._record(conn, sent, failures, result, summary)
        summary.schd_events += len(sent)
        return bool(sent or dead)

    # --- marks ----------------------------------------------------------------------------------
    def _record(self, conn: Connection, sent: list[int], failures: list[SendFailure], result: SendResult,
                summary: DispatchSummary) -> int:
        """Mark one send's outcome; returns how many events were dead-lettered (progress for the queue).
        A failure is stored with the client's last words about the broker, on the events and in
        ``kafka_status`` (what ``msgx outbox``, the checks and the alerts show); the first delivery
        after it is recorded there too."""
        now = self.clock.now()
        if failures and result.broker_error:
            failures = [f._replace(error=f"{f.error}; last broker error: {result.broker_error}") for f in failures]
        outbox.mark_sent(conn, sent, now)
        dead = outbox.mark_failed(conn, failures, now, self.options.policy)
        if failures:
            kafka_status.record_failure(conn, self.sink.bootstrap, safe_text(failures[0].error), now)
            self._failing = True
        elif sent and self._failing:
            kafka_status.record_delivery(conn, now)
            self._failing = False
        conn.commit()
        self._dead.update(dead)
        summary.failed += len(failures)
        summary.dead += len(dead)
        if failures:
            log.warning("%s event(s) not delivered, backing off: %s", len(failures), safe_text(failures[0].error))
        return len(dead)

    def _load_dead(self) -> None:
        """The dead events there are when this dispatcher takes the lock (one scan; it alone
        dead-letters events while it holds the lock, so ``_record`` keeps the set complete)."""
        conn = self._conn()
        self._dead = set(outbox.dead_event_ids(conn))
        conn.commit()

    def _conn(self) -> Connection:
        assert self.conn is not None, "run() owns the connection"
        return self.conn
