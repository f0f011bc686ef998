"""The unit of work of the queue head: the one owner of the pump's transaction boundaries.

The message path (``protocol.py``) says what happened to a message (its head was read, its writes
are ready, it was applied, its status is written, something failed) and never commits or rolls
back itself. A unit of work turns each of those into transaction boundaries:

- ``OneMessage``: every message commits on its own, transaction 1 then (after the post-commit
  hooks) transaction 2, or both as one commit when there is no hook (docs/decisions.md P8, folded transactions). This
  is what ``App.processor()`` gives, and what a grouped run falls back to after a redo.
- ``Grouped`` (``grouped.py``): the pump's group commit (P10) with its read-ahead (P11) and
  write-behind (P13, P16): consecutive messages share one transaction, and the unit of work
  reads, holds and writes for them.

Both answer the same methods. A rollback that takes an open group with it is not an exception:
the methods that can cost the group return a ``Regroup`` (or its REGROUP step result), the step
ends there, and the pump redoes those messages one commit each.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from msgx_engine import faults
from msgx_engine.pipeline.large_bodies import gc_pause
from msgx_engine.pipeline.outcomes import Applied, PostCommitHook, Regroup, StepKind, StepResult, Terminal
from msgx_engine.pipeline.source import BodySource
from msgx_engine.pipeline.status import StatusRecorder, pid
from msgx_engine.sis.decode import SisMessage
from msgx_engine.state.model import FlightState
from msgx_engine.store import locks, outbox, queue
from msgx_engine.store.flights import FlightRepository
from msgx_engine.store.outbox import OutboxRow
from msgx_engine.store.queue import QueueHead

# Whether a read of the store could see a held write (``routing.BeforeRead``'s argument).
Concerns = Callable[[FlightState], bool] | None
# The read-ahead's decode of a later head (None: not read yet, or it does not decode).
DecodeAhead = Callable[[int], SisMessage | None]
FlidsOf = Callable[[SisMessage], list[str] | None]


class UnitOfWork(ABC):
    """Where the queue head's transactions begin and end; see the module docstring."""

    def __init__(self, *, source: BodySource, status: StatusRecorder, hooks: Sequence[PostCommitHook],
                 folds: bool, on_release: Callable[[], None] | None = None) -> None:
        self.source = source
        self.status = status
        self.hooks = list(hooks)
        self.folds = folds      # no post-commit step: transaction 2 commits with transaction 1 (P8)
        self.on_release = on_release

    # --- transaction 1 begins: the head and what it reads ------------------------------------
    @abstractmethod
    def head(self, conn: Connection) -> QueueHead | Regroup | None:
        """The smallest non-terminal id (INV-3); its query locks the writer row."""

    def decoded(self, msg_id: int) -> SisMessage | None:
        """The head's message if it was decoded ahead (P11)."""
        return None

    def preloaded(self, conn: Connection, msg: SisMessage, flids_of: FlidsOf,
                  decode_ahead: DecodeAhead) -> Mapping[str, FlightState | None] | None:
        """Flight states read ahead for ``msg`` (P11); None: the route loads its own."""
        return None

    def before_read(self, conn: Connection, concerns: Concerns) -> None:
        """A statement is about to read the store: anything held that it could see goes first."""
        return None

    def holds(self, conn: Connection, head: QueueHead, states: Sequence[FlightState],
              loaded: Mapping[str, FlightState], events: Sequence[OutboxRow], *, plans: bool) -> bool:
        """True: the unit of work holds the message's states and events and writes them later
        (P13, write-behind); False: the caller writes them now."""
        return False

    # --- transaction 1 ends -------------------------------------------------------------------
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

    # --- recording: the status statement and its commit ---------------------------------------
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
    def settle(self, conn: Connection, result: StepResult) -> StepResult:
        """The step ends: what is open commits; ``result``, or REGROUP when the group was lost."""

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
