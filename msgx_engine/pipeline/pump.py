"""The pump: the single active writer that runs intake, the queue head and inline backfill.

It holds a PostgreSQL session advisory lock for its whole life on the connection it writes
with (OPS-1), so a lost connection loses the lock and every guarded write with it. A second pump
exits at once. It also holds a named lock on the mailbox server (``mailbox.lock``), so a second
installation with its own PostgreSQL pointed at the same mailbox exits at once too. In drain
mode it stops when nothing is processable; in long-lived mode it idle-polls for a while so a
message is processed within ~0.2 s of landing (DESIGN §5), within ~20 ms while messages keep
coming.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from msgx_engine.db import is_disconnect
from msgx_engine.mailbox.lock import MailboxBusy, MailboxLock
from msgx_engine.pipeline.backfill import Backfill
from msgx_engine.pipeline.grouping.grouped import Grouped, Grouping
from msgx_engine.pipeline.grouping.lookahead import DEFAULT_SIZE as READ_AHEAD
from msgx_engine.pipeline.intake import Intake
from msgx_engine.pipeline.large_bodies import gc_pause, offload
from msgx_engine.pipeline.outcomes import StepKind
from msgx_engine.pipeline.protocol import Processor
from msgx_engine.pipeline.unit_of_work import OneMessage, UnitOfWork
from msgx_engine.pipeline.writer import LockLost
from msgx_engine.pipeline.writer_scope import writer_scope
from msgx_engine.store import backfill_todos, locks, monitoring, queue_figures
from msgx_engine.store.cutover_state import WriteRight, WritesStopped
from msgx_engine.store.session_lock import SessionLock

log = logging.getLogger(__name__)


class PumpBusy(RuntimeError):
    """Another pump holds the writer lock, or another installation the mailbox lock."""


@dataclass
class PumpOptions:
    idle_for_s: float = 0.0          # 0: drain mode (exit when nothing is processable)
    idle_poll_s: float = 0.2         # the pause between polls of a quiet mailbox
    busy_poll_s: float = 0.02        # ... and while messages keep coming (the last one < busy_window_s ago)
    busy_window_s: float = 2.0
    max_runtime_s: float = 3600.0
    heartbeat_s: float = 10.0
    inline_backfill: bool = True
    backfill_every_s: float = 0.1    # while messages keep coming, the inline backfill runs at most this often
    reconnect_for_s: float = 60.0
    exit_when_waiting: bool = False  # drain only what is processable now (tests with a ManualClock)
    group_messages: int = 64         # group commit (P10): at most this many messages per commit (1: off)
    group_s: float = 0.05            # ... and a group stays open at most this long
    read_ahead: int = READ_AHEAD     # a group reads this many heads and their flights at once (P11, read-ahead)
    write_behind: bool = True        # ... and writes its messages' states and statuses together (P13, write-behind;
                                     # P16, two-transaction write-behind)

    def grouping(self) -> Grouping:
        return Grouping(self.group_messages, self.group_s, self.read_ahead, self.write_behind)


@dataclass
class PumpSummary:
    processed: Counter = field(default_factory=Counter)      # status -> count (this run)
    registered: int = 0
    late_arrivals: int = 0
    marked: int = 0
    started: float = field(default_factory=time.monotonic)
    reconnects: int = 0
    source_errors: int = 0

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def as_metadata(self) -> dict[str, float | int]:
        data: dict[str, float | int] = {f"processed_{k.lower()}": v for k, v in sorted(self.processed.items())}
        data.update(registered=self.registered, late_arrivals=self.late_arrivals, marked=self.marked,
                    elapsed_s=round(self.elapsed_s, 3), reconnects=self.reconnects,
                    source_errors=self.source_errors)
        return data


def pause_s(options: PumpOptions, quiet_for_s: float) -> float:
    """The pause before the next poll: short while messages keep arriving, so one that lands
    between two polls waits ``busy_poll_s`` rather than a whole ``idle_poll_s`` (at a steady
    250 msg/s that pause was most of the latency); a mailbox quiet for
    ``busy_window_s`` is polled every ``idle_poll_s`` again."""
    return options.busy_poll_s if quiet_for_s < options.busy_window_s else options.idle_poll_s


def status_counts(conn: Connection) -> dict[str, int]:
    counts = queue_figures.status_counts(conn)
    conn.commit()
    return counts


def compose_pump(engine: Engine, processor: Processor, intake: Intake, backfill: Backfill,
                 options: PumpOptions | None = None, *, on_release: Callable[[], None] | None = None,
                 **kw) -> Pump:
    """The pump, put together in one place: ``processor`` under the unit of work ``options`` ask
    for, one commit per message (``group_messages=1``) or the group commit with its read-ahead
    and write-behind (P10-P16), calling ``on_release`` (the inline dispatcher's wake-up: delivery
    follows the commit) after each commit that released events. The processor's body source
    comes along with what it has read already."""
    options = options or PumpOptions()
    p = processor
    alone = OneMessage(source=p.source, status=p.status, hooks=p.post_commit, folds=p.folds_transactions,
                       on_release=on_release)
    uow: UnitOfWork = alone
    if options.group_messages > 1:
        uow = Grouped.over(alone, options.grouping(), floor=intake.floor)
    return Pump(engine, replace(processor, unit_of_work=uow), intake, backfill, options, **kw)


class Pump:
    def __init__(self, engine: Engine, processor: Processor, intake: Intake, backfill: Backfill,
                 options: PumpOptions | None = None,
                 on_heartbeat: Callable[[PumpSummary], None] | None = None,
                 should_stop: Callable[[], bool] | None = None,
                 mailbox_lock: MailboxLock | None = None) -> None:
        self.engine = engine
        self.mailbox_lock = mailbox_lock
        self.processor = processor
        self.uow = processor.uow
        self.intake = intake
        self.backfill = backfill
        self.options = options or PumpOptions()
        self.on_heartbeat = on_heartbeat
        self.should_stop = should_stop or (lambda: False)
        self.conn: Connection | None = None
        self._backfilled_at = -math.inf      # monotonic time of the last inline backfill batch
        self.writes = WriteRight(engine, shadow=intake.shadow)   # a cut-over stopped writes here (PRE-1)
        self.lock = SessionLock(engine, locks.PUMP, "msgx pump", PumpBusy, refusal=(
            f"another msgx pump holds the writer lock (pg advisory lock {locks.PUMP}); "
            "this pump exits without processing"))

    # --- lock ---------------------------------------------------------------------------------
    def _reconnect(self, summary: PumpSummary) -> None:
        self.conn = None
        try:
            self.conn = self.lock.reacquire(self.options.reconnect_for_s)
        except DBAPIError:
            log.error("PostgreSQL still unavailable after %ss: the pump exits for the sensor to restart it",
                      self.options.reconnect_for_s)
            raise
        summary.reconnects += 1

    # --- liveness ------------------------------------------------------------------------------
    def _beat(self, *, started: bool = False) -> None:
        """Record the pump's heartbeat in PostgreSQL (``/metrics`` reads it from any instance).
        Its own short transaction; a failure is left to the loop, which notices a dead database
        on its next statement anyway."""
        try:
            with self.engine.begin() as conn:
                monitoring.beat(conn, monitoring.PUMP, pid=os.getpid(), host=socket.gethostname(), started=started)
        except SQLAlchemyError as exc:
            log.warning("pump heartbeat not recorded: %s", exc.__class__.__name__)

    # --- loop ----------------------------------------------------------------------------------
    def run(self) -> PumpSummary:
        summary = PumpSummary()
        gc_pause.freeze_start_up()
        offload.warm_up()
        # started as PostgreSQL goes away (a restart): wait for it as a running pump would
        self.conn = self.lock.acquire_within(self.options.reconnect_for_s)
        try:
            self.writes.check(self.conn)
            self._beat(started=True)
            if self.mailbox_lock is not None:
                self.mailbox_lock.start()
            self._loop(summary)
        except (MailboxBusy, WritesStopped) as exc:
            raise PumpBusy(str(exc)) from exc
        finally:
            if self.mailbox_lock is not None:
                self.mailbox_lock.dispose()
            self.lock.release()
        return summary

    def _loop(self, summary: PumpSummary) -> None:
        opts = self.options
        last_activity = time.monotonic()
        last_beat = time.monotonic()
        while not self.should_stop() and not self.writes.stopped_meanwhile():
            if summary.elapsed_s >= opts.max_runtime_s:
                log.info("pump reached its max runtime of %ss; exiting for the sensor to restart it",
                         opts.max_runtime_s)
                break
            try:
                busy, waiting, blocked = self._iteration(summary)
                drained = not busy and not waiting and opts.idle_for_s <= 0 and self._drained()
            except (SQLAlchemyError, LockLost) as exc:
                if not isinstance(exc, LockLost) and not is_disconnect(exc):
                    raise
                log.warning("lost the PostgreSQL session or the writer lock: %s", exc.__class__.__name__)
                self.uow.discard()
                self._reconnect(summary)
                continue
            now = time.monotonic()
            if busy:
                last_activity = now
            if now - last_beat >= opts.heartbeat_s:
                self._beat()
                if self.on_heartbeat:
                    self.on_heartbeat(summary)
                last_beat = now
            if busy:
                continue
            if blocked and opts.idle_for_s <= 0:
                # drain mode: nothing is processable until an operator resolves the head (D24, vanished mailbox row)
                log.warning("the queue head waits for an operator (its mailbox row vanished): "
                            "drain stops; resolve it with msgx skip or msgx replay")
                break
            if waiting and opts.exit_when_waiting:
                break
            if not waiting:
                if drained:
                    break
                if opts.idle_for_s > 0 and now - last_activity >= opts.idle_for_s:
                    break
            time.sleep(pause_s(opts, now - last_activity))

    def _iteration(self, summary: PumpSummary) -> tuple[bool, bool, bool]:
        """One intake pass, then the head until it idles or waits, then a backfill batch: (busy,
        the head waits, the head waits for an operator)."""
        try:
            return self._pass(summary)
        finally:
            gc_pause.resume()      # however the pass ended, the collector runs again between passes (P20, GC pause)

    def _pass(self, summary: PumpSummary) -> tuple[bool, bool, bool]:
        assert self.conn is not None
        if self.mailbox_lock is not None:
            self.mailbox_lock.keep()
        with writer_scope(self.conn, self.uow) as conn:
            stats = self.intake.scan(conn)
        summary.registered += stats.registered
        summary.late_arrivals += stats.late_arrivals
        summary.source_errors += stats.source_error is not None
        busy = stats.registered > 0
        waiting = blocked = False
        for _ in range(self.intake.batch):
            result = self.processor.step(self.conn)
            if result.kind == StepKind.REGROUP:       # a group was rolled back: its messages come again
                busy = True
                continue
            if result.kind != StepKind.PROCESSED:
                waiting = result.kind.waiting
                blocked = result.kind == StepKind.WAIT_OPERATOR
                break
            busy = True
            if not result.deferred:
                summary.processed[result.status or "?"] += 1
        self.uow.flush(self.conn)                     # the group commits before its marks are written
        for result in self.uow.committed():
            summary.processed[result.status or "?"] += 1
        if self.options.inline_backfill and self._backfill_due(busy, time.monotonic()):
            with writer_scope(self.conn, self.uow) as conn:
                b = self.backfill.run_once(conn)
            summary.marked += b.marked
            busy = busy or bool(b.marked or b.already or b.missing)
        return busy, waiting, blocked

    def _backfill_due(self, busy: bool, now: float) -> bool:
        """Whether this pass writes a batch of marks. A quiet pass always does. While messages
        keep coming, at most every ``backfill_every_s``: its round trips (two of them to the
        mailbox) delay the next intake pass, so every message waited for the last one's mark
        (latency); a mark owed for 0.1 s more is written with the next batch. ``now``:
        ``time.monotonic()``."""
        if busy and now - self._backfilled_at < self.options.backfill_every_s:
            return False
        self._backfilled_at = now
        return True

    def _drained(self) -> bool:
        assert self.conn is not None
        with writer_scope(self.conn, self.uow) as conn:     # its two reads end with the scope's commit
            open_rows = queue_figures.open_count(conn)
            todo_due = (backfill_todos.due_todos(conn, self.processor.clock.now())
                        if self.options.inline_backfill else 0)
        return open_rows == 0 and todo_due == 0

