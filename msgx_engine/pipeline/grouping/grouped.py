"""The pump's unit of work: consecutive messages share one transaction (docs/decisions.md P10-P16:
P10, group commit; P11, read-ahead; P13, write-behind; P16, two-transaction write-behind).

One GTDT in a group, from the pump loop to its commit (the steps of ``unit_of_work.py``, with
three performance decisions behind them that the message path need not know):

- ``head``: the next head read ahead in this transaction (P11, read-ahead, ``lookahead.py``: one head query
  reads the next 64 heads); when none is left, the group's applied messages commit, or what the
  write-behind holds is sent (the head query must see it), and the next heads are read;
- ``begin``: a ``GroupedTransaction``, with the message decoded ahead if it was;
- ``tx.flights.preloaded``: the flight states of this head and of the read-ahead heads after it,
  read in one statement the first time one of them asks;
- ``tx.flights.write``: a message without plans hands its states and events to the write-behind
  (P13, P16, two-transaction write-behind, ``behind.py``), and its states become the next
  messages' current ones; nothing reaches PostgreSQL yet. A message with plans sends what is held, then its own writes;
- ``tx.read_other``: a statement that could see a held write (a route's loader, a derived read)
  sends what is held first, so the transaction reads its own writes;
- ``tx.finish``: the status stays uncommitted (held with the writes when the write-behind has
  them); the group (P10, ``group.py``) commits at 64 messages or 50 ms, when the head idles or
  waits, and before the pump marks the mailbox (``flush``): the held writes go in three round
  trips, then the commit. With a post-commit step the group's transactions 1 commit together,
  then its post-commit steps run and its transactions 2 commit in one statement (P12, grouped two-transaction
  messages; P16).

A message that would roll back while the group is open (``tx.abandon``, or a refused status)
would undo the finished messages before it, so the group is abandoned whole (``Regroup``) and
its messages are redone one commit each, exactly as without groups. When the held writes are
refused at a read the message path started, the store's error is raised to it as any failure
would be; its ``abandon`` then reports the lost group.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection

from msgx_engine import faults
from msgx_engine.handlers.decision import Plan
from msgx_engine.pipeline.grouping.behind import WriteBehind
from msgx_engine.pipeline.grouping.group import GroupCommit
from msgx_engine.pipeline.grouping.lookahead import DEFAULT_SIZE as READ_AHEAD
from msgx_engine.pipeline.grouping.lookahead import Lookahead
from msgx_engine.pipeline.grouping.queue_floor import QueueFloor
from msgx_engine.pipeline.outcomes import Applied, PostCommitHook, Regroup, StepKind, StepResult, Terminal
from msgx_engine.pipeline.routing import preloadable_flids
from msgx_engine.pipeline.source import BodySource
from msgx_engine.pipeline.status import StatusRecorder, pid
from msgx_engine.pipeline.transitions import projection_wait
from msgx_engine.pipeline.unit_of_work import (
    Concerns,
    DecodeAhead,
    MessageFlights,
    MessageTransaction,
    UnitOfWork,
    hook_states,
    quiet_rollback,
)
from msgx_engine.redact import safe_text
from msgx_engine.sis.decode import SisMessage
from msgx_engine.state.model import FlightState
from msgx_engine.store import locks, queue
from msgx_engine.store.outbox import OutboxRow
from msgx_engine.store.queue import QueueHead, Status

log = logging.getLogger(__name__)

AppliedMessage = tuple[QueueHead, Sequence[FlightState]]


@dataclass(frozen=True)
class Grouping:
    """How the pump groups (``PumpOptions``): at most ``messages`` per commit (1: one at a time)
    and ``max_s`` open, ``read_ahead`` heads read at once, with or without the write-behind."""

    messages: int = 64
    max_s: float = 0.05
    read_ahead: int = READ_AHEAD
    write_behind: bool = True


class Grouped(UnitOfWork):
    """Group commit with read-ahead and (``behind``) write-behind; see the module docstring."""

    def __init__(self, *, group: GroupCommit[StepResult], lookahead: Lookahead, behind: WriteBehind | None,
                 source: BodySource, status: StatusRecorder, hooks: Sequence[PostCommitHook], folds: bool,
                 on_release: Callable[[], None] | None, floor: QueueFloor | None = None) -> None:
        super().__init__(source=source, status=status, hooks=hooks, folds=folds, on_release=on_release)
        self.floor = floor or QueueFloor()
        self.group = group
        self.lookahead = lookahead
        self.behind = behind
        self._applied: dict[int, AppliedMessage] = {}     # applied, not yet terminal (P12, grouped two-transaction
                                                          # messages)
        self._lost: Regroup | None = None                 # the held writes were refused at a read

    @classmethod
    def over(cls, alone: UnitOfWork, grouping: Grouping, *, floor: QueueFloor | None = None) -> Grouped:
        """``grouping``'s group commit, recording as ``alone`` does (its status recorder, hooks,
        folded transactions and release callback); the write-behind only if ``grouping`` asks."""
        return cls(group=GroupCommit(grouping.messages, grouping.max_s),
                   lookahead=Lookahead(min(grouping.messages, grouping.read_ahead)),
                   behind=WriteBehind(terminal=alone.folds) if grouping.write_behind else None,
                   source=alone.source, status=alone.status, hooks=alone.hooks, folds=alone.folds,
                   on_release=alone.on_release, floor=floor)

    # --- the step: the head, and a message's transaction --------------------------------------
    def head(self, conn: Connection) -> QueueHead | Regroup | None:
        """The next head read ahead in this transaction; else the group's applied messages commit
        and its held writes are sent first (the head query must see them), then the next heads are
        read together (P11)."""
        self._lost = None
        found = self.lookahead.take_head(conn)
        if found is not None:
            return found
        lost = self._commit(conn) if self._applied else self._sent(conn)
        if lost is not None:
            return lost
        heads = queue.heads(conn, pid=pid(conn), writer_row=locks.WRITER_ROW, limit=self.lookahead.size,
                            start=self.floor.start())
        self.floor.saw(heads[0].msg_id if heads else None)
        if not heads:
            return None
        self.lookahead.keep_heads(conn, heads[1:])
        return heads[0]

    def begin(self, conn: Connection, head: QueueHead, decode_ahead: DecodeAhead) -> GroupedTransaction:
        """The head's transaction within the group: its message decoded ahead, if it was (P11)."""
        return GroupedTransaction(self, conn, head, GroupedFlights(self, conn, head, decode_ahead),
                                  self.lookahead.take_decoded(head.msg_id))

    # --- what a message's transaction asks of it --------------------------------------------------
    def applied(self, conn: Connection, head: QueueHead, msg: SisMessage, now: datetime,
                states: Sequence[FlightState]) -> Applied | None:
        """Inside the group the applied mark stays uncommitted (held with the message's writes when
        the write-behind has them, P16); a message redone alone commits transaction 1 now."""
        joins = self.group.joins(head.msg_id)
        if joins and self.behind is not None and head.msg_id in self.behind.msg_ids:
            self.behind.hold_status(applied_row(head, msg, now))
        else:
            self.status.applied(conn, head, msg, now)
        faults.reach("before_tx1_commit")
        if joins:
            return Applied(states)
        conn.commit()
        return None

    def post_commit(self, conn: Connection, msg_id: int, states: Sequence[FlightState]) -> Regroup | None:
        """A message applied before (INV-20b) finishes after the group's applied messages before it."""
        if self._applied:
            lost = self._commit(conn)
            if lost is not None:
                return lost
        return super().post_commit(conn, msg_id, states)

    def terminal(self, conn: Connection, head: QueueHead, t: Terminal) -> StepResult:
        """A folded message of the group stays uncommitted (its status held with its writes by the
        write-behind, P13); it is counted once its group commits."""
        if not (self.folds and self.group.joins(head.msg_id)):
            return super().terminal(conn, head, t)
        behind = self.behind
        if behind is not None and head.msg_id in behind.msg_ids and t.msg is not None and t.applied_at:
            behind.hold_status(applied_row(head, t.msg, t.applied_at))
            result = StepResult(StepKind.PROCESSED, head.msg_id, t.status, t.reason, deferred=True)
        else:
            result = self.record(conn, head.msg_id, lambda: self._terminal(conn, head, t, deferred=True),
                                 commit=False)
            if result.kind == StepKind.REGROUP:
                return result
        return self._join(conn, head.msg_id, result)

    def hold_applied(self, conn: Connection, head: QueueHead, applied: Applied) -> StepResult:
        """An applied message joins the group (P12): counted once its terminal status commits."""
        self._applied[head.msg_id] = (head, applied.states)
        return self._join(conn, head.msg_id, StepResult(StepKind.PROCESSED, head.msg_id, Status.SUCCEEDED,
                                                         deferred=True))

    def _join(self, conn: Connection, msg_id: int, result: StepResult) -> StepResult:
        if self.group.add(msg_id, result):
            return self.settle(conn, result)
        return result

    def settle(self, conn: Connection, result: StepResult) -> StepResult:
        lost = self._commit(conn)
        return result if lost is None else lost.result

    def undo(self, conn: Connection, msg_id: int) -> Regroup | None:
        """With an open group the rollback undid finished messages too: the group is abandoned and
        redone one commit at a time (P10); a lost session takes it with it (the pump reconnects)."""
        quiet_rollback(conn)
        self._dropped()
        if self._lost is not None:
            lost, self._lost = self._lost, None
            return lost
        if not self.group.pending:
            return None
        if conn.invalidated:
            self.group.discard()
            return None
        return self.group.abort(msg_id)

    # --- the pump -------------------------------------------------------------------------------
    @property
    def holding(self) -> bool:
        return bool(self.group.pending)

    def flush(self, conn: Connection) -> None:
        """A group whose held writes are refused is rolled back here; the next pass redoes it."""
        try:
            if self.group.pending:
                lost = self._commit(conn)
                if lost is not None:
                    log.info("%s", lost.result.reason)
        finally:
            super().flush(conn)

    def committed(self) -> list[StepResult]:
        return self.group.take()

    def discard(self) -> None:
        self._dropped()
        self._lost = None
        self.group.discard()

    # --- the group's commit -----------------------------------------------------------------------
    def _commit(self, conn: Connection) -> Regroup | None:
        """Commit, and with it the open group: its messages are now terminal for good, or, applied
        with two transactions, go on to their post-commit steps and transaction 2."""
        lost = self._sent(conn)
        if lost is not None:
            return lost
        conn.commit()
        self.lookahead.reset()
        pending = list(self.group.pending)
        self.group.pending.clear()
        if pending and self._applied:
            self._finish_applied(conn, pending)
        elif pending:
            self.group.committed.extend(result for _, result in pending)
            self.released([msg_id for msg_id, _ in pending])
        return None

    def _finish_applied(self, conn: Connection, pending: list[tuple[int, StepResult]]) -> None:
        """The group's transaction 1 has committed: the post-commit steps in id order, then the
        terminal statuses of the messages that passed them in one transaction 2, one statement
        (P12, P16). A post-commit step that fails (Redis down) makes that message wait (D22, projection failure);
        the messages after it stay applied and open behind it, and the head path finishes them
        without applying their state again (INV-20b)."""
        applied, self._applied = self._applied, {}
        done, failed = self._post_commit_group(conn, [applied[msg_id] for msg_id, _ in pending])
        finished = pending[:done]
        if finished:
            ids = [msg_id for msg_id, _ in finished]
            try:
                self.status.finished(conn, ids)
            except Exception:
                quiet_rollback(conn)     # refused or failed: the pump reconnects
                raise
            conn.commit()
            self.group.committed.extend(result for _, result in finished)
            self.released(ids)
        if failed is not None:
            waiting, error = failed
            wait = projection_wait(waiting, error, self.status.clock.now(), self.status.policy)
            self.record(conn, waiting.msg_id, lambda: self.status.wait(conn, waiting, wait))

    def _post_commit_group(self, conn: Connection, batch: list[AppliedMessage]
                           ) -> tuple[int, tuple[QueueHead, Exception] | None]:
        """The post-commit steps of a committed group, in id order: how many messages finished
        them, and the first that failed with its error. Hooks that take a whole group (``many``,
        the Redis projection: one round trip, P16) get it at once, and a failure is then the first
        message's (D22: it waits, the rest stay applied and open behind it); others go message by
        message."""
        batched = [getattr(hook, "many", None) for hook in self.hooks]
        if not all(batched):
            for done, (head, states) in enumerate(batch):
                faults.reach("between_tx1_tx2")
                try:
                    self._run_hooks(conn, head.msg_id, states)
                except Exception as exc:
                    quiet_rollback(conn)
                    return done, (head, exc)
            return len(batch), None
        for _ in batch:
            faults.reach("between_tx1_tx2")
        try:
            if batched:
                group = [(head.msg_id, hook_states(conn, head.msg_id, states)) for head, states in batch]
                conn.commit()
                for many in batched:
                    assert many is not None
                    many(conn, group)
        except Exception as exc:
            quiet_rollback(conn)
            return 0, (batch[0][0], exc)
        return len(batch), None

    # --- the write-behind -------------------------------------------------------------------------
    def send_held(self, conn: Connection, concerns: Concerns = None) -> None:
        """Write what the write-behind holds (P13); with ``concerns``, only when a held flight
        passes it (a read of other flights cannot see the held writes). Refused (an identity
        already bound, a lost lock, any error), the group is rolled back, kept as lost for the
        rollback that follows, and the store's error raised; a lost session goes to the pump."""
        behind = self.behind
        if behind is None or not behind.concerns(concerns):
            return
        last = max([*behind.msg_ids, *(i for i, _ in self.group.pending)])
        try:
            behind.write(conn, now=self.status.clock.now(), pid=pid(conn), window=self.status.identity_window)
        except Exception as exc:
            quiet_rollback(conn)
            if conn.invalidated:
                self.discard()
                raise
            self._dropped()
            log.info("the group's held writes were refused (%s: %s)", type(exc).__name__, safe_text(str(exc)[:200]))
            self._lost = self.group.abort(last)
            raise

    def _sent(self, conn: Connection) -> Regroup | None:
        """``send_held`` where nothing of the message path is under way: a refusal is the lost group."""
        try:
            self.send_held(conn)
        except Exception:
            lost, self._lost = self._lost, None
            if lost is None:
                raise
            return lost
        return None

    def _dropped(self) -> None:
        """The transaction is gone: what it read ahead, applied or held went with it."""
        self.lookahead.reset()
        self._applied.clear()
        if self.behind is not None:
            self.behind.clear()


def applied_row(head: QueueHead, msg: SisMessage, applied_at: datetime) -> queue.Applied:
    """A held message's status row for the write-behind (P13, P16)."""
    return queue.Applied(head.msg_id, applied_at, msg.meta.type, msg.meta.styp, msg.payload_hash, msg.meta.identity)


class GroupedFlights(MessageFlights):
    """A grouped message's flights: the states the read-ahead read for it (P11), and writes the
    write-behind holds for the group's commit when it can (P13, P16)."""

    def __init__(self, uow: Grouped, conn: Connection, head: QueueHead, decode_ahead: DecodeAhead) -> None:
        super().__init__(conn, head, folds=uow.folds)
        self.uow = uow
        self.decode_ahead = decode_ahead

    def preloaded(self, msg: SisMessage) -> Mapping[str, FlightState | None] | None:
        return self.uow.lookahead.states_for(self.conn, msg, preloadable_flids, self.decode_ahead)

    def _write(self, states: Sequence[FlightState], *, now: datetime, previous: Mapping[str, FlightState],
               events: Sequence[OutboxRow], plans: Sequence[Plan], limit: int) -> None:
        """A message of the group that writes no plans is held (P13, write-behind; with two
        transactions, P16) and its states are the next messages' current ones; plans read their
        own writes, so what is held is sent first, then the message's writes, and what they
        wrote is read again."""
        uow, behind = self.uow, self.uow.behind
        if behind is not None and uow.group.joins(self.head.msg_id) and not plans:
            behind.hold(self.head.msg_id, states, previous, events)
            uow.lookahead.wrote(self.conn, states)
            return
        uow.send_held(self.conn)
        uow.lookahead.written((st.flid for st in states), plans=bool(plans))
        super()._write(states, now=now, previous=previous, events=events, plans=plans, limit=limit)


class GroupedTransaction(MessageTransaction):
    """A grouped message's transaction: a read of the store first sends the held writes it
    could see (P13); its status commits with the group (``Grouped.terminal``)."""

    uow: Grouped

    def read_other(self, concerns: Concerns = None) -> None:
        self.uow.send_held(self.conn, concerns)
