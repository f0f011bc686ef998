"""The unit of work of the queue head: where the pump's transactions begin and end.

One GTDT, from the pump loop to its commit. ``Pump._pass`` calls ``Processor.step``, which asks
its unit of work for the ``head`` (transaction 1 begins: the head query locks the writer row) and
opens the message's transaction, ``begin(conn, head)``: a ``MessageTransaction``. Through it, and
only through it, the message path (``protocol.py``) works on the message:

- ``tx.flights``, the message's flights: ``preloaded`` (what was read ahead for it, for the
  route) and ``write`` (its flight states, events and plans);
- ``tx.read_other(concerns)`` before a statement reads the store (a route's loader, a derived
  field's read), so it sees every write the transaction made;
- ``tx.finish(outcome)``: the end of transaction 1, the post-commit step, the terminal (or
  waiting, or failed) status and the commits, as the outcome asks; the step's ``StepResult``;
- ``tx.abandon()``: transaction 1 ends without its writes (nothing to write, or a failure).

The two units of work answer these alike, so the path reads the same in both modes:

- ``OneMessage`` (here): every message commits on its own. ``write`` sends the states and events
  now (one pipelined round trip, then the plans), ``finish`` commits transaction 1, runs the
  post-commit hooks, then commits transaction 2, or both as one commit when there is no hook
  (docs/decisions.md P8, folded transactions). This is what ``App.processor()`` gives, and what
  ``PumpOptions(group_messages=1)`` asks for.
- ``Grouped`` (``grouping/grouped.py``): the pump's group commit (P10) with its read-ahead (P11)
  and write-behind (P13, P16, two-transaction write-behind). ``write`` hands the states to the
  write-behind, which sends them at the group's commit or before the next statement that could
  read them (a later message's ``read_other`` or head query); ``finish`` leaves the status
  uncommitted for the group's commit.

``pump.compose_pump`` picks the one the pump runs. A rollback that takes an open group with it
is not an exception: ``finish`` and ``abandon`` return the REGROUP step result (or ``Regroup``),
the step ends there, and the pump redoes those messages one commit each. The pump itself uses
``flush``, ``committed``, ``discard`` and ``holding``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from functools import partial

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from msgx_engine import faults
from msgx_engine.db import pipelined
from msgx_engine.handlers.decision import Plan
from msgx_engine.pipeline.large_bodies import gc_pause
from msgx_engine.pipeline.outcomes import (
    Applied,
    Failed,
    Outcome,
    PostCommitHook,
    Regroup,
    SourceWait,
    Step,
    StepKind,
    StepResult,
    Terminal,
    Wait,
    Written,
)
from msgx_engine.pipeline.plans import write_plans
from msgx_engine.pipeline.source import BodySource
from msgx_engine.pipeline.status import StatusRecorder, pid
from msgx_engine.sis.decode import SisMessage
from msgx_engine.state.model import FlightState
from msgx_engine.store import locks, outbox, queue
from msgx_engine.store.flights import FlightRepository
from msgx_engine.store.outbox import OutboxRow
from msgx_engine.store.queue import QueueHead, Status

# Whether a read of the store could see a held write (``routing.BeforeRead``'s argument).
Concerns = Callable[[FlightState], bool] | None
# The read-ahead's decode of a later head (None: not read yet, or it does not decode).
DecodeAhead = Callable[[int], SisMessage | None]
# ``Processor._classify``: how a failure of the steps ``finish`` runs becomes an outcome.
Classify = Callable[["MessageTransaction", Step, SisMessage | None, Exception], Outcome]


class UnitOfWork(ABC):
    """Where the queue head's transactions begin and end; see the module docstring."""

    def __init__(self, *, source: BodySource, status: StatusRecorder, hooks: Sequence[PostCommitHook],
                 folds: bool, on_release: Callable[[], None] | None = None) -> None:
        self.source = source
        self.status = status
        self.hooks = list(hooks)
        self.folds = folds      # no post-commit step: transaction 2 commits with transaction 1 (P8)
        self.on_release = on_release

    # --- the step: the head, and a message's transaction ------------------------------------
    @abstractmethod
    def head(self, conn: Connection) -> QueueHead | Regroup | None:
        """The smallest non-terminal id (INV-3); its query locks the writer row."""

    def begin(self, conn: Connection, head: QueueHead, decode_ahead: DecodeAhead) -> MessageTransaction:
        """The head's transaction (transaction 1, begun by the head query). ``decode_ahead``
        decodes a later head whose body is read already (the read-ahead's, P11)."""
        return MessageTransaction(self, conn, head, MessageFlights(conn, head, folds=self.folds))

    @abstractmethod
    def settle(self, conn: Connection, result: StepResult) -> StepResult:
        """The step ends (the head idles or waits, or a status is written): what is open commits;
        ``result``, or REGROUP when the group was lost."""

    # --- what a message's transaction asks of it ----------------------------------------------
    @abstractmethod
    def applied(self, conn: Connection, head: QueueHead, msg: SisMessage, now: datetime,
                states: Sequence[FlightState]) -> Applied | None:
        """``applied_at`` and the identity binding (two transactions): None once transaction 1 has
        committed and the post-commit step is due now; ``Applied`` when it waits in the group."""

    def post_commit(self, conn: Connection, msg_id: int, states: Sequence[FlightState]) -> Regroup | None:
        """The hooks between the transactions (INV-17b: terminal only after they succeed); a hook
        that raises leaves the message open. The read of the states ends before the hooks run."""
        self._run_hooks(conn, msg_id, states)
        return None

    def _run_hooks(self, conn: Connection, msg_id: int, states: Sequence[FlightState]) -> None:
        if not self.hooks:
            return
        states = hook_states(conn, msg_id, states)
        conn.commit()
        for hook in self.hooks:
            hook(conn, msg_id, states)

    def terminal(self, conn: Connection, head: QueueHead, t: Terminal) -> StepResult:
        """Write the terminal status and commit it (transaction 2, or transaction 1's commit when
        folded): the message is done."""
        result = self.record(conn, head.msg_id, lambda: self._terminal(conn, head, t))
        if result.kind != StepKind.REGROUP:
            self.released([head.msg_id])
        return result

    def _terminal(self, conn: Connection, head: QueueHead, t: Terminal, *, deferred: bool = False) -> StepResult:
        self.status.terminal(conn, head, t)
        return StepResult(StepKind.PROCESSED, head.msg_id, t.status, t.reason, deferred=deferred)

    def hold_applied(self, conn: Connection, head: QueueHead, applied: Applied) -> StepResult:
        """An applied message waits for its group's commit (P12, grouped two-transaction messages); only a group has
        one."""
        raise AssertionError(f"mailbox id {head.msg_id}: only a group holds applied messages")

    def record(self, conn: Connection, msg_id: int, write: Callable[[], StepResult], *,
               commit: bool = True) -> StepResult:
        """A status statement (``write``) and its commit (``commit``: else the group's commit
        takes it later). Refused or failed, the transaction is rolled back and the error raised,
        unless the rollback cost the open group (REGROUP)."""
        try:
            result = write()
            return self.settle(conn, result) if commit else result
        except Exception:
            lost = self.undo(conn, msg_id)
            if lost is not None:
                return lost.result
            raise

    @abstractmethod
    def undo(self, conn: Connection, msg_id: int) -> Regroup | None:
        """Undo what the head's transaction wrote (a broken session's rollback error is ignored:
        the caller's error says more). ``Regroup`` when that undid an open group too."""

    # --- the pump -------------------------------------------------------------------------------
    @property
    def holding(self) -> bool:
        """Finished messages wait for a commit (their large objects are kept until then, P20, GC pause)."""
        return False

    def flush(self, conn: Connection) -> None:
        """Commit an open group (the pump calls it before marking the mailbox). The collector
        runs again afterwards: the group's commit was part of its messages (P20)."""
        gc_pause.resume()

    def committed(self) -> list[StepResult]:
        """The grouped results committed since the last call (the pump counts them)."""
        return []

    def discard(self) -> None:
        """The session was lost: whatever was open died with it, uncommitted."""
        return None

    def released(self, msg_ids: Sequence[int]) -> None:
        """A commit made these messages terminal for good: their bodies are dropped, the inline
        dispatcher is told their events are released, the ``after_tx2`` fault step is reached."""
        if self.on_release is not None:
            self.on_release()
        for msg_id in msg_ids:
            self.source.forget(msg_id)
            faults.reach("after_tx2")


class OneMessage(UnitOfWork):
    """One commit per message (per transaction, with a post-commit step)."""

    def head(self, conn: Connection) -> QueueHead | None:
        return queue.head(conn, pid=pid(conn), writer_row=locks.WRITER_ROW)

    def applied(self, conn: Connection, head: QueueHead, msg: SisMessage, now: datetime,
                states: Sequence[FlightState]) -> None:
        self.status.applied(conn, head, msg, now)
        faults.reach("before_tx1_commit")
        conn.commit()

    def settle(self, conn: Connection, result: StepResult) -> StepResult:
        conn.commit()
        return result

    def undo(self, conn: Connection, msg_id: int) -> None:
        quiet_rollback(conn)


class MessageFlights:
    """One message's flights: what was read ahead for it, and where its writes go. This one
    (one commit per message) reads nothing ahead and sends the writes to PostgreSQL at once;
    ``grouped.GroupedFlights`` may hold them for the group's commit."""

    def __init__(self, conn: Connection, head: QueueHead, *, folds: bool) -> None:
        self.conn = conn
        self.head = head
        self.folds = folds

    def preloaded(self, msg: SisMessage) -> Mapping[str, FlightState | None] | None:
        """Flight states read ahead for ``msg`` under the lock in this transaction (P11, None:
        not stored); None: the route loads its own."""
        return None

    def write(self, states: Sequence[FlightState], *, now: datetime, previous: Mapping[str, FlightState],
              events: Sequence[OutboxRow], plans: Sequence[Plan], limit: int) -> None:
        """The message's flight states (``previous``: the stored states they replace, as the route
        loaded them), its events and its plans with theirs; an event over ``limit`` bytes raises
        ``RecordTooLarge`` before anything of it is written, or (a plan's) as it is written."""
        if not plans:      # before the first write; with plans, ``insert`` checks each row once
            outbox.check_record_sizes(events, limit)
        self._write(states, now=now, previous=previous, events=events, plans=plans, limit=limit)

    def _write(self, states: Sequence[FlightState], *, now: datetime, previous: Mapping[str, FlightState],
               events: Sequence[OutboxRow], plans: Sequence[Plan], limit: int) -> None:
        """The writes, now: states and events in one round trip, then the plans."""
        conn = self.conn
        # one commit for both transactions (P8): the events are written released, as the terminal
        # status write would release them in the same commit (P25, events released at write)
        released_at = now if self.folds else None
        with pipelined(conn):        # the writes travel together: one round trip, not one each
            # the route looked up every flight it writes: one it did not find has no stored row
            FlightRepository(conn).persist_next_states(states, now=now, previous=previous,
                                                       unstored={st.flid for st in states} - set(previous))
            if not plans:
                outbox.insert(conn, events, released_at=released_at)
                events = []
        # plan writers read their own results (ledger CAS): not pipelined
        planned = write_plans(conn, plans, self.head.msg_id, now)
        # each row, the events' too, checked as it is written (a snapshot's are built then):
        # RecordTooLarge aborts the statement, and the rollback undoes the flights and the plans
        outbox.insert(conn, [*events, *planned] if events else planned, released_at=released_at, limit=limit)


class MessageTransaction:
    """One message's transaction as the message path sees it (see the module docstring): its
    flights, its reads of other tables, and how it ends. This one commits the message alone;
    ``grouped.GroupedTransaction`` leaves it to the group's commit."""

    def __init__(self, uow: UnitOfWork, conn: Connection, head: QueueHead, flights: MessageFlights,
                 decoded_ahead: SisMessage | None = None) -> None:
        self.uow = uow
        self.conn = conn
        self.head = head
        self.flights = flights
        self.decoded_ahead = decoded_ahead      # the head's message, decoded by the read-ahead (P11)

    def read_other(self, concerns: Concerns = None) -> None:
        """A statement is about to read the store (``concerns``: the flights whose writes it could
        see; None: any). Alone, every write was sent as it was made: nothing to do."""
        return None

    def abandon(self) -> Regroup | None:
        """Transaction 1 ends without its writes (nothing to write, or a failure to classify):
        rolled back. ``Regroup`` when that undid an open group too."""
        return self.uow.undo(self.conn, self.head.msg_id)

    def finish(self, outcome: Outcome, classify: Classify) -> StepResult:
        """Record ``outcome``: for ``Written``, the end of transaction 1 (folded into the terminal
        status, P8), its post-commit step and transaction 2; else the one guarded status
        statement; and the commits. A failure of those steps is classified (``classify``) and
        recorded in turn."""
        uow, conn, head = self.uow, self.conn, self.head
        if isinstance(outcome, Written):
            outcome = self._after_writes(outcome, classify)
        if isinstance(outcome, Terminal) and outcome.applied_at is not None:
            # Folded: this commit is transaction 1's too, so its failure is a transaction-1
            # failure (an identity clash surfaces here, through the unique constraint).
            try:
                return uow.terminal(conn, head, outcome)
            except Exception as exc:
                outcome = classify(self, Step.WRITE_STATE, outcome.msg, exc)
        if isinstance(outcome, Failed):             # US-03 AC4/AC5: the last attempt ends it DEAD
            outcome = uow.status.exhausted(head, outcome) or outcome
        if isinstance(outcome, Regroup):
            return outcome.result
        if isinstance(outcome, SourceWait):
            return uow.settle(conn, uow.status.source_wait(conn, head, outcome.exc))
        if isinstance(outcome, Wait):
            return uow.record(conn, head.msg_id, partial(uow.status.wait, conn, head, outcome))
        if isinstance(outcome, Failed):
            return uow.record(conn, head.msg_id, partial(uow.status.failed, conn, head, outcome))
        if isinstance(outcome, Applied):
            return uow.hold_applied(conn, head, outcome)
        assert not isinstance(outcome, Written)
        return uow.terminal(conn, head, outcome)

    def _after_writes(self, written: Written, classify: Classify) -> Outcome:
        """Transaction 1's end once its writes are made: folded, the terminal status (with
        ``applied_at``) commits it; else ``applied_at`` and the identity binding commit it (or
        wait in the group, P12), then the post-commit step runs (INV-20b: alone for a message
        applied before)."""
        uow, conn, head, msg = self.uow, self.conn, self.head, written.msg
        step = Step.POST_COMMIT
        try:
            if msg is not None:
                if uow.folds:                       # transaction 2 commits with transaction 1 (P8)
                    faults.reach("before_tx1_commit")
                    return Terminal(Status.SUCCEEDED, msg=msg, applied_at=written.applied_at)
                step = Step.COMMIT_APPLIED
                assert written.applied_at is not None
                joined = uow.applied(conn, head, msg, written.applied_at, written.states)
                if joined is not None:              # transaction 1 commits with its group's (P12)
                    return joined
                faults.reach("between_tx1_tx2")
                step = Step.POST_COMMIT
            return uow.post_commit(conn, head.msg_id, written.states) or Terminal(Status.SUCCEEDED)
        except Exception as exc:
            return classify(self, step, msg, exc)


def hook_states(conn: Connection, msg_id: int, states: Sequence[FlightState]) -> Sequence[FlightState]:
    """What a message's post-commit step sees: the states it changed, or, when it had plans
    (none returned), every flight its events name, as stored."""
    if states:
        return states
    return list(FlightRepository(conn).load(outbox.flids_of(conn, msg_id)).values())


def quiet_rollback(conn: Connection) -> None:
    """Roll back; on a broken session the rollback's own error is ignored (the pump reconnects)."""
    try:
        conn.rollback()
    except DBAPIError:
        pass
