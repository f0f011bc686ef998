"""The processing protocol for the queue head (DESIGN §2 steps 2-9): one message's path, read top to bottom.

One GTDT from the pump loop to its commit. ``Pump._pass`` calls ``Processor.step``; the unit of
work (``unit_of_work.py``, chosen by ``pump.compose_pump``) reads the ``head`` (transaction 1
begins: the writer row is locked with it) and ``Processor.process`` opens the message's
transaction, ``tx = uow.begin(conn, head)``. Then, each step named for what it does:

    read_and_decode            body from the mailbox (prefetched), hardened decode, ignore rules
    decide                     the route loads its context under the lock (``tx.flights.preloaded``,
                               ``tx.read_other``); the pure handler decides
    write_state                ``tx.flights.write``: flight states, events, plans
    tx.finish(outcome)         ``applied_at`` + identity binding ending transaction 1, the post-commit
                               hooks (the Redis projection), transaction 2's terminal status, history,
                               backfill todo and event release; or the waiting or failed status
    tx.abandon()               transaction 1 ends without its writes (nothing to write, or a failure)

With no post-commit hook the terminal status commits with transaction 1 (docs/decisions.md P8,
folded transactions; ``MSGX_SPLIT_TRANSACTIONS`` forces the split). A message found with
``applied_at`` set is not applied again: only the post-commit and the terminal steps run (INV-20b).

Every step returns an ``Outcome`` (``outcomes.py``) instead of writing a status, and ``_classify``
is the one place that turns an exception into one: a message fault is a FAILED attempt with its
error class (backoff, then DEAD); an infrastructure fault that is not the message's (PostgreSQL
connection dropped, writer lock lost) consumes no attempt and propagates to the pump; an
unreachable mailbox makes the head wait. ``tx.finish`` has the outcome written by the one guarded
status statement (``status.py``, INV-8).

This module never commits, rolls back or holds a write: the message's transaction does. So the
path reads the same whether each message commits alone (``write`` sends the rows now, ``finish``
commits) or the pump groups them (``grouping/grouped.py``: ``write`` hands the rows to the
write-behind and ``finish`` leaves the commit to the group's); the pure decisions it asks for
(next flight states, verdicts, waits) are in ``transitions.py``. It holds no SQL.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError

from msgx_engine.clock import Clock
from msgx_engine.config import KAFKA_MAX_RECORD_BYTES
from msgx_engine.db import is_disconnect
from msgx_engine.handlers.decision import APPLY, DEAD, Decision
from msgx_engine.pipeline import routing
from msgx_engine.pipeline.large_bodies import gc_pause, offload
from msgx_engine.pipeline.outcomes import (
    DecoderCrash,
    ErrorClass,
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
from msgx_engine.pipeline.policy import RetryPolicy
from msgx_engine.pipeline.source import BodySource, SourceUnavailable
from msgx_engine.pipeline.status import StatusRecorder
from msgx_engine.pipeline.transitions import (
    dead,
    identity_clash,
    ignored_by,
    next_states,
    projection_wait,
    tree_refused,
    vanished,
)
from msgx_engine.pipeline.unit_of_work import MessageTransaction, OneMessage, UnitOfWork
from msgx_engine.pipeline.writer import LockLost
from msgx_engine.sis.decode import MAX_BODY_BYTES, SisMessage, SisRefused, decode
from msgx_engine.state.model import FlightState
from msgx_engine.store import identity, outbox, queue
from msgx_engine.store.bridges import BridgeReader
from msgx_engine.store.queue import QueueHead, Status
from msgx_engine.store.version_floor import Floors

log = logging.getLogger(__name__)


@dataclass
class Processor:
    source: BodySource
    clock: Clock
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    ignore_rules: tuple[str, ...] = ("LDM-*", "RSTA-*")
    gap_grace_s: float = 5.0
    max_body_bytes: int = MAX_BODY_BYTES
    post_commit: list[PostCommitHook] = field(default_factory=list)
    identity_window: timedelta = identity.DEFAULT_WINDOW      # D26, identity window: how long an identity binds
    split_transactions: bool = False
    max_record_bytes: int = KAFKA_MAX_RECORD_BYTES    # a larger event ends the message DEAD(oversize)
    # the unit of work the pump runs it under (``pump.compose_pump``); None: one commit per message
    unit_of_work: UnitOfWork | None = None
    # whether the state database holds any version floor (O19): read when the pump is composed;
    # only the cut-over commands and ``msgx recover`` write floors, never while a pump runs, so a
    # database without any lets a new flight skip the look-up
    version_floors: bool = True

    def __post_init__(self) -> None:
        self.status = StatusRecorder(self.clock, self.policy, self.identity_window)
        self.uow = self.unit_of_work or OneMessage(source=self.source, status=self.status, hooks=self.post_commit,
                                                   folds=self.folds_transactions)

    @property
    def folds_transactions(self) -> bool:
        """With no post-commit step there is nothing to do between transactions 1 and 2, so
        transaction 2's writes join transaction 1 and commit with it (one commit, same outcome
        as the two committed back to back; docs/decisions.md P8). ``split_transactions`` forces
        the two-commit path (the crash matrix uses it to crash between the two)."""
        return not self.post_commit and not self.split_transactions

    # --- the queue head ------------------------------------------------------------------------
    def step(self, conn: Connection) -> StepResult:
        """Process the queue head once if it is due. Never lets a larger id overtake it (INV-3)."""
        result = self._step(conn)
        if result.kind == StepKind.REGROUP:
            log.info("%s", result.reason)
        return result

    def _step(self, conn: Connection) -> StepResult:
        head = self.uow.head(conn)
        if isinstance(head, Regroup):
            return head.result
        if head is None:
            return self.uow.settle(conn, StepResult(StepKind.IDLE))
        now = self.clock.now()
        if head.gap_seen is not None:
            until = head.gap_seen + timedelta(seconds=self.gap_grace_s)
            if until > now:
                return self.uow.settle(conn, StepResult(StepKind.WAIT_GAP, head.msg_id, wait_until=until))
            passed = queue.pass_gaps(conn, head.msg_id, now)
            log.warning("passed %s expired gap(s) below mailbox id %s", passed, head.msg_id)
        if head.next_attempt_at is not None and head.next_attempt_at > now:
            kind = StepKind.WAIT_OPERATOR if head.error_class == ErrorClass.SOURCE_MISSING else StepKind.WAIT_BACKOFF
            return self.uow.settle(conn, StepResult(kind, head.msg_id, wait_until=head.next_attempt_at))
        return self.process(conn, head)

    # --- one message ---------------------------------------------------------------------------
    def process(self, conn: Connection, head: QueueHead) -> StepResult:
        """The message path, in the head's transaction (begun by the head query). A large body is
        processed with the garbage collector paused (P20, GC pause), resumed here whatever the
        end, or when the message waits for its group's commit, once the group is committed
        (``flush``)."""
        tx = self.uow.begin(conn, head, self._decode_ahead)
        try:
            return tx.finish(self._attempt(tx), self._classify)
        finally:
            if not self.uow.holding:
                gc_pause.resume()

    def _attempt(self, tx: MessageTransaction) -> Outcome:
        """Every step up to the end of transaction 1; what it came to, not yet recorded."""
        head = tx.head
        if head.applied_at is not None:       # crash or hook failure after transaction 1 (INV-20b)
            return Written(None)
        step = Step.READ_AND_DECODE
        msg: SisMessage | None = None
        routed: routing.Routed | None = None
        states: Sequence[FlightState] = ()
        try:
            decoded = self.read_and_decode(tx)
            if not isinstance(decoded, SisMessage):
                return decoded
            msg = decoded
            step = Step.DECIDE
            routed = self.decide(tx, msg)
            if routed.decision.outcome == APPLY:
                step = Step.WRITE_STATE
                now = self.clock.now()
                states = self.write_state(tx, msg, routed, now)
                refused = msg.refusal()         # P32, tree checks in the helper: before anything commits
                if refused is not None:
                    raise refused
                return Written(msg, now, states)
            lost = tx.abandon()                 # nothing to write: transaction 1 ends here
            if lost is not None:
                return lost
        except Exception as exc:
            return self._classify(tx, step, msg, exc)
        finally:
            gc_pause.hold(msg, routed, states)   # a large message's objects are freed once it has committed
        return self._verdict(tx.conn, head, decoded, routed.decision)

    def read_and_decode(self, tx: MessageTransaction) -> SisMessage | Terminal | Wait:
        """The body (a vanished mailbox row waits for an operator, D24), the hardened decode (DEAD
        MALFORMED, or SKIPPED when an ignore rule names the type anyway), the ignore rules (US-04).
        Raises SourceUnavailable when the mailbox cannot be read, DecoderCrash when the decoder
        itself fails."""
        head = tx.head
        body = self.source.body(tx.conn, head.msg_id)
        if body is None:
            self.source.forget(head.msg_id)          # look in the mailbox again next time
            return vanished(head, self.policy)
        gc_pause.pause_for(len(body))
        try:
            msg = tx.decoded_ahead or decode(body, max_bytes=self.max_body_bytes, hasher=offload.submit)
        except SisRefused as exc:
            rule = ignored_by(self.ignore_rules, exc.meta) if exc.meta is not None else None
            if rule is not None:     # US-04: an ignored type is skipped whatever its body looks like
                return Terminal(Status.SKIPPED, f"ignored:{rule}")
            return dead(exc)
        except Exception as exc:
            raise DecoderCrash(exc) from exc
        rule = ignored_by(self.ignore_rules, msg.meta)
        if rule is not None:    # a tree decode would have refused is no ignored message (P32)
            return tree_refused(msg) or Terminal(Status.SKIPPED, f"ignored:{rule}", msg=msg, bind=False)
        return msg

    def decide(self, tx: MessageTransaction, msg: SisMessage) -> routing.Routed:
        """Route and decide under the writer row lock the head query took (transaction 1): with
        the flight states read ahead for the message when they cover it, any other read after
        the transaction's writes it could see are sent (``read_other``)."""
        head = tx.head
        if not head.writer_held:
            raise LockLost("transaction 1 refused: this session does not hold the writer lock")
        routed = routing.decide(tx.conn, msg, head.msg_id, tx.flights.preloaded(msg), before_read=tx.read_other)
        if routed.decision.alert:
            log.error("ALERT mailbox id %s %s: %s", head.msg_id, msg.meta.type_styp, routed.decision.alert)
        return routed

    def write_state(self, tx: MessageTransaction, msg: SisMessage, routed: routing.Routed,
                    now: datetime) -> list[FlightState]:
        """Write the decision's flight states, its plans and the unreleased outbox events
        (INV-17b) in the message's transaction; the states its post-commit step sees.

        Identity (INV-9, D26) is checked optimistically: binding it is part of the guarded status
        write, and a binding held by another row inside the window refuses it, which rolls the whole
        transaction back before the clash is classified. One round trip less per message."""
        conn, head = tx.conn, tx.head
        states, events, shown = next_states(routed, head.msg_id, msg.meta, BridgeReader(conn, head.msg_id),
                                            replayed=head.replayed,
                                            floor=Floors(conn) if self.version_floors else lambda flid: 0)
        plans = routed.decision.plans
        tx.flights.write(states, now=now, previous=routed.flights, events=events, plans=plans,
                         limit=self.max_record_bytes)
        # a plan writes flights of its own: the post-commit step then reads every flight the
        # message's events name instead of only the changed ones; a silent write (F6, last writer wins) has no event
        # and nothing for the projection
        return [] if plans else shown

    # --- verdicts and failures ---------------------------------------------------------------
    def _verdict(self, conn: Connection, head: QueueHead, msg: SisMessage, decision: Decision) -> Terminal:
        """A handler's SKIPPED or DEAD; the identity is checked first (a duplicate stays a duplicate),
        and before it the tree checks decode left to the helper (P32)."""
        refused = tree_refused(msg)
        if refused is not None:
            return refused
        other = self._bound_elsewhere(conn, head, msg)
        if other is not None:
            return identity_clash(head.msg_id, msg, other)
        if decision.outcome == DEAD:
            return Terminal(Status.DEAD, decision.reason, decision.detail, ErrorClass.MALFORMED, msg=msg)
        return Terminal(Status.SKIPPED, decision.reason, decision.detail, msg=msg,
                        bind=decision.reason == "unsupported")

    def _classify(self, tx: MessageTransaction, step: Step, msg: SisMessage | None, exc: Exception) -> Outcome:
        """The one place a failure is classified. Raises what is not the message's fault: a lost
        PostgreSQL session or writer lock (the pump reconnects), any error reading the queue."""
        conn, head = tx.conn, tx.head
        if isinstance(exc, SourceUnavailable):      # the mailbox, not the message: wait, no attempt
            return SourceWait(exc)
        if isinstance(exc, DecoderCrash):           # a decoder defect, not a verdict on the message: retried
            log.exception("decoder error on mailbox id %s", head.msg_id, exc_info=exc.error)
            return Failed(ErrorClass.CODEC_ERROR, exc.error)
        if step == Step.READ_AND_DECODE:            # reading the queue failed: the pump decides
            raise exc
        lost = tx.abandon()
        if lost is not None:                        # an open group went with it: redone one by one (P10, group commit)
            return lost
        if isinstance(exc, LockLost) or (isinstance(exc, SQLAlchemyError) and is_disconnect(exc)):
            raise exc
        if step == Step.POST_COMMIT:
            return projection_wait(head, exc, self.clock.now(), self.policy)
        if isinstance(exc, SisRefused):             # the helper's tree checks (P32): rolled back, as decode's
            return dead(exc)
        refused = tree_refused(msg) if msg is not None else None
        if refused is not None:                     # a tree decode would have refused: whatever failed on it
            return refused
        if isinstance(exc, outbox.RecordTooLarge) and msg is not None:   # rolled back: nothing written
            return self._verdict(conn, head, msg, Decision.dead("oversize", str(exc)))
        if isinstance(exc, identity.IdentityTaken) and msg is not None:
            other = self._bound_elsewhere(conn, head, msg)
            return identity_clash(head.msg_id, msg, other) if other is not None else Failed(ErrorClass.INFRA, exc, msg)
        if isinstance(exc, SQLAlchemyError):
            return Failed(ErrorClass.INFRA, exc, msg)
        log.exception("handler error on mailbox id %s", head.msg_id)
        return Failed(ErrorClass.HANDLER_ERROR, exc, msg)

    # --- identity and read-ahead (INV-9, D26, P11) ----------------------------------------------
    def _bound_elsewhere(self, conn: Connection, head: QueueHead, msg: SisMessage) -> identity.Binding | None:
        """The message this one's identity is bound to inside the window (D26), if any."""
        return identity.bound_elsewhere(conn, msg.meta.identity, head.msg_id, head.registered_at,
                                        self.identity_window)

    def _decode_ahead(self, msg_id: int) -> SisMessage | None:
        """A read-ahead head's message, if its body is read already and decodes (P11); anything
        else is left for its turn, where the usual path classifies it."""
        body = self.source.cached(msg_id)
        if body is None:
            return None
        try:
            return decode(body, max_bytes=self.max_body_bytes, hasher=offload.submit)
        except Exception:
            return None
