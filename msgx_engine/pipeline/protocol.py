"""The processing protocol for the queue head (DESIGN §2 steps 2-9), read top to bottom.

One message goes through named steps; ``Processor.process`` shows them and where each transaction
begins and ends:

    head query                 transaction 1 begins: the writer row is locked with the head
    read_and_decode            body from the mailbox (prefetched), hardened decode, ignore rules
    decide                     the route loads its context under the lock; the pure handler decides
    write_state                flight states, plans, unreleased outbox events (one round trip)
    commit_applied             ``applied_at`` + identity binding; transaction 1 commits
    post_commit                the hooks (the Redis projection) between the transactions
    commit_terminal            transaction 2: terminal status, history, backfill todo, event release

With no post-commit hook, ``commit_applied`` and ``post_commit`` are skipped and the terminal
status commits with transaction 1 (docs/decisions.md P8; ``MSGX_SPLIT_TRANSACTIONS`` forces the
split). A message found with ``applied_at`` set is not applied again: only the post-commit and
the terminal steps run (INV-20b).

Every step before the terminal write returns an ``Outcome`` instead of writing a status, and
``_classify`` is the one place that turns an exception into one: a message fault is a FAILED
attempt with its error class (backoff, then DEAD); an infrastructure fault that is not the
message's (PostgreSQL connection dropped, writer lock lost) consumes no attempt and propagates to
the pump; an unreachable mailbox makes the head wait. ``_record`` then writes the outcome with the
one guarded status statement of ``store.queue`` (INV-8). This module holds no SQL.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from msgx_engine import faults
from msgx_engine.clock import Clock
from msgx_engine.config import KAFKA_MAX_RECORD_BYTES
from msgx_engine.db import is_disconnect, pipelined
from msgx_engine.handlers import codeshare
from msgx_engine.handlers.changes import next_state
from msgx_engine.handlers.decision import APPLY, DEAD, Decision
from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.pipeline import gc_pause, offload, routing
from msgx_engine.pipeline.behind import WriteBehind
from msgx_engine.pipeline.group import GroupAborted, GroupCommit
from msgx_engine.pipeline.lookahead import Lookahead
from msgx_engine.pipeline.plans import write_plans
from msgx_engine.pipeline.policy import RetryPolicy
from msgx_engine.pipeline.source import BodySource, SourceUnavailable
from msgx_engine.pipeline.writer import LockLost, writer_pid
from msgx_engine.redact import safe_text
from msgx_engine.sis.content_hash import same_content
from msgx_engine.sis.decode import MAX_BODY_BYTES, Meta, SisMessage, SisRefused, decode
from msgx_engine.state.bridges import STAND_KEYS, BridgeMap, derive, needs_derivation, stands_of
from msgx_engine.state.model import FlightState
from msgx_engine.state.serialize import document_changes
from msgx_engine.store import identity, locks, outbox, queue
from msgx_engine.store.bridges import BridgeReader
from msgx_engine.store.flights import FlightRepository
from msgx_engine.store.outbox import OutboxRow
from msgx_engine.store.queue import HistoryRow, QueueHead, Status

log = logging.getLogger(__name__)

SOURCE_RETRY_S = 2.0

# A post-commit hook gets the transaction-1 outcome (touched states) and may raise to keep the
# message non-terminal (it is then retried; the state is not applied twice).
PostCommitHook = Callable[[Connection, int, Sequence[FlightState]], None]


class StepKind(StrEnum):
    """What one ``Processor.step`` did."""

    PROCESSED = "processed"          # the head got a status (terminal or FAILED)
    IDLE = "idle"                    # nothing open
    WAIT_BACKOFF = "wait_backoff"    # the head's next attempt is not due
    WAIT_GAP = "wait_gap"            # a smaller id is missing and its grace has not expired
    WAIT_SOURCE = "wait_source"      # the mailbox is unreachable and the head's body not cached
    WAIT_OPERATOR = "wait_operator"  # the head's mailbox row vanished: an operator resolves it (D24)
    REGROUP = "regroup"              # an open group was rolled back: its messages are redone alone (P10)

    @property
    def waiting(self) -> bool:
        return self in (StepKind.WAIT_BACKOFF, StepKind.WAIT_GAP, StepKind.WAIT_SOURCE, StepKind.WAIT_OPERATOR)


@dataclass(frozen=True)
class StepResult:
    kind: StepKind
    msg_id: int | None = None
    status: Status | None = None
    reason: str | None = None
    wait_until: datetime | None = None
    deferred: bool = False           # terminal, but its commit is the group's (P10): counted once committed


class ErrorClass(StrEnum):
    """``proc_state.error_class``: why an attempt failed or a message died."""

    MALFORMED = "MALFORMED"          # the message itself: refused by the decoder or its handler
    CODEC_ERROR = "CODEC_ERROR"      # the decoder crashed: retried
    HANDLER_ERROR = "HANDLER_ERROR"  # a handler or engine defect: retried, then dead-lettered
    INFRA = "INFRA"                  # a statement or a post-commit step failed: retried
    SOURCE_UNAVAILABLE = "SOURCE_UNAVAILABLE"   # noted while the head waits for the mailbox
    PROJECTION = "PROJECTION"        # the post-commit projection failed: the head waits, no attempt (D22)
    SOURCE_MISSING = "SOURCE_MISSING"  # the mailbox row vanished: the head waits for an operator (D24)


class Step(StrEnum):
    """The message path; the step a failure happened in decides its class (``_classify``)."""

    READ_AND_DECODE = "read_and_decode"
    DECIDE = "decide"
    WRITE_STATE = "write_state"
    COMMIT_APPLIED = "commit_applied"
    POST_COMMIT = "post_commit"


# --- outcomes: what a message's attempt came to, before it is recorded ---------------------------
@dataclass(frozen=True)
class Terminal:
    """SUCCEEDED, SKIPPED or DEAD, written by transaction 2 (or folded into transaction 1)."""

    status: Status
    reason: str | None = None
    detail: str | None = None
    error_class: ErrorClass | None = None
    msg: SisMessage | None = None     # records type, subtype and payload hash
    bind: bool = True                 # ... and binds the identity (not for duplicates or ignored)
    dup_of: int | None = None
    applied_at: datetime | None = None


@dataclass(frozen=True)
class Failed:
    """A failed attempt: backoff, or DEAD(exhausted) (US-03 AC4/AC5)."""

    error_class: ErrorClass
    exc: BaseException


@dataclass(frozen=True)
class Wait:
    """The head waits for something outside the message: the projection (D22) or an operator
    (D24). It stays open (FAILED, not terminal, not marked, events not released), uses no attempt
    and is retried after ``delay_s``; ``alert`` is logged as an ALERT when set."""

    error_class: ErrorClass
    detail: str
    delay_s: float
    alert: str | None = None


@dataclass(frozen=True)
class SourceWait:
    """The mailbox is down and the head's body is not cached: wait, no attempt used."""

    exc: SourceUnavailable


@dataclass(frozen=True)
class Applied:
    """Transaction 1's writes and ``applied_at`` are in the open group's transaction (P12): the
    post-commit step and the terminal status follow once the group commits."""

    states: Sequence[FlightState]


Outcome = Terminal | Failed | SourceWait | Wait | Applied


class DecoderCrash(Exception):
    """The decoder itself failed (not a verdict on the message)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass
class Processor:
    mailbox: Mailbox
    clock: Clock
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    ignore_rules: tuple[str, ...] = ("LDM-*", "RSTA-*")
    gap_grace_s: float = 5.0
    max_body_bytes: int = MAX_BODY_BYTES
    post_commit: list[PostCommitHook] = field(default_factory=list)
    identity_window: timedelta = identity.DEFAULT_WINDOW      # D26: how long an identity binds
    source: BodySource = field(init=False)
    split_transactions: bool = False
    group: GroupCommit[StepResult] | None = None     # group commit (P10): only the pump sets it
    lookahead: Lookahead | None = None               # ... with its read-ahead (P11)
    behind: WriteBehind | None = None                # ... and its write-behind (P13)
    max_record_bytes: int = KAFKA_MAX_RECORD_BYTES    # a larger event ends the message DEAD(oversize)
    on_release: Callable[[], None] | None = None      # called after a commit that made messages terminal

    def __post_init__(self) -> None:
        self.source = BodySource(self.mailbox)
        self._applied: dict[int, tuple[QueueHead, Sequence[FlightState]]] = {}   # the group's applied (P12)

    @property
    def folds_transactions(self) -> bool:
        """With no post-commit step there is nothing to do between transactions 1 and 2, so
        transaction 2's writes join transaction 1 and commit with it (one commit, same outcome
        as the two committed back to back; docs/decisions.md P8). ``split_transactions`` forces
        the two-commit path (the crash matrix uses it to crash between the two)."""
        return not self.post_commit and not self.split_transactions

    # --- the queue head ------------------------------------------------------------------------
    def head(self, conn: Connection) -> QueueHead | None:
        """The smallest non-terminal id (INV-3); the query also locks the writer row. In a group
        it reads the next heads too, and while its transaction lasts they are taken in turn (P11)."""
        ahead = self.lookahead
        if ahead is None:
            return queue.head(conn, pid=_pid(conn), writer_row=locks.WRITER_ROW)
        found = ahead.take_head(conn)
        if found is not None:
            return found
        if self._applied:     # applied, not yet terminal: the group commits before the head is read again
            self._commit(conn)
        self._send_behind(conn)     # the statuses held back must be in the store the head query reads
        heads = queue.heads(conn, pid=_pid(conn), writer_row=locks.WRITER_ROW, limit=ahead.size)
        if not heads:
            return None
        ahead.keep_heads(conn, heads[1:])
        return heads[0]

    def step(self, conn: Connection) -> StepResult:
        """Process the queue head once if it is due. Never lets a larger id overtake it (INV-3)."""
        try:
            return self._step(conn)
        except GroupAborted as exc:
            log.info("%s", exc)
            return StepResult(StepKind.REGROUP, exc.msg_id)

    def _step(self, conn: Connection) -> StepResult:
        head = self.head(conn)
        if head is None:
            self._commit(conn)
            return StepResult(StepKind.IDLE)
        now = self.clock.now()
        if head.gap_seen is not None:
            until = head.gap_seen + timedelta(seconds=self.gap_grace_s)
            if until > now:
                self._commit(conn)
                return StepResult(StepKind.WAIT_GAP, head.msg_id, wait_until=until)
            passed = queue.pass_gaps(conn, head.msg_id, now)
            log.warning("passed %s expired gap(s) below mailbox id %s", passed, head.msg_id)
        if head.next_attempt_at is not None and head.next_attempt_at > now:
            self._commit(conn)
            kind = StepKind.WAIT_OPERATOR if head.error_class == ErrorClass.SOURCE_MISSING else StepKind.WAIT_BACKOFF
            return StepResult(kind, head.msg_id, wait_until=head.next_attempt_at)
        return self.process(conn, head)

    # --- one message ---------------------------------------------------------------------------
    def process(self, conn: Connection, head: QueueHead) -> StepResult:
        """The message path. Transaction 1 was begun by the head query; it commits in
        ``commit_applied`` or, folded, with the terminal status in ``_record``. A large body is
        processed with the garbage collector paused (P20), resumed here whatever the end, or
        when the message waits in an open group, once the group is committed (``flush``)."""
        try:
            return self._record(conn, head, self._attempt(conn, head))
        finally:
            if self.group is None or not self.group.pending:
                gc_pause.resume()

    def _attempt(self, conn: Connection, head: QueueHead) -> Outcome:
        """Every step up to the terminal status; what it came to, not yet recorded."""
        step = Step.POST_COMMIT
        msg: SisMessage | None = None
        routed: routing.Routed | None = None
        states: Sequence[FlightState] = ()
        try:
            if head.applied_at is not None:       # crash or hook failure after transaction 1 (INV-20b)
                if self._applied:                 # the group before it finishes first (P12)
                    self._commit(conn)
                self.post_commit_steps(conn, head.msg_id, [])
                return Terminal(Status.SUCCEEDED)
            step = Step.READ_AND_DECODE
            decoded = self.read_and_decode(conn, head)
            if not isinstance(decoded, SisMessage):
                return decoded
            msg = decoded
            step = Step.DECIDE
            routed = self.decide(conn, head, msg)
            if routed.decision.outcome == APPLY:
                step = Step.WRITE_STATE
                now = self.clock.now()
                states = self.write_state(conn, head, msg, routed, now)
                refused = msg.refusal()         # P32: the helper's tree checks, before anything commits
                if refused is not None:
                    raise refused
                if self.folds_transactions:     # transaction 2 commits with transaction 1 (P8)
                    faults.reach("before_tx1_commit")
                    return Terminal(Status.SUCCEEDED, msg=msg, applied_at=now)
                step = Step.COMMIT_APPLIED
                if self.group is not None and self.group.joins(head.msg_id):     # P12
                    if self.behind is not None and head.msg_id in self.behind.msg_ids:   # held back (P16)
                        self.behind.hold_status(_applied_row(head, msg, now))
                    else:
                        self.mark_applied(conn, head, msg, now)
                    faults.reach("before_tx1_commit")
                    return Applied(states)
                self.commit_applied(conn, head, msg, now)
                faults.reach("between_tx1_tx2")
                step = Step.POST_COMMIT
                self.post_commit_steps(conn, head.msg_id, states)
                return Terminal(Status.SUCCEEDED)
            self._rollback(conn, head)          # nothing to write: transaction 1 ends here
        except Exception as exc:
            return self._classify(conn, head, step, msg, exc)
        finally:
            gc_pause.hold(msg, routed, states)   # a large message's objects are freed once it has committed
        return self._verdict(conn, head, decoded, routed.decision)

    def read_and_decode(self, conn: Connection, head: QueueHead) -> SisMessage | Terminal | Wait:
        """The body (a vanished mailbox row waits for an operator, D24), the hardened decode (DEAD
        MALFORMED, or SKIPPED when an ignore rule names the type anyway), the ignore rules (US-04).
        Raises SourceUnavailable when the mailbox cannot be read, DecoderCrash when the decoder
        itself fails."""
        body = self.source.body(conn, head.msg_id)
        if body is None:
            return self._vanished(head)
        gc_pause.pause_for(len(body))
        try:
            msg = (self.lookahead and self.lookahead.take_decoded(head.msg_id)) or decode(
                body, max_bytes=self.max_body_bytes, hasher=offload.submit)
        except SisRefused as exc:
            rule = self._ignored_by(exc.meta) if exc.meta is not None else None
            if rule is not None:     # US-04: an ignored type is skipped whatever its body looks like
                return Terminal(Status.SKIPPED, f"ignored:{rule}")
            return _dead(exc)
        except Exception as exc:
            raise DecoderCrash(exc) from exc
        rule = self._ignored_by(msg.meta)
        if rule is not None:    # a tree decode would have refused is no ignored message (P32)
            return _tree_refused(msg) or Terminal(Status.SKIPPED, f"ignored:{rule}", msg=msg, bind=False)
        return msg

    def decide(self, conn: Connection, head: QueueHead, msg: SisMessage) -> routing.Routed:
        """Route and decide under the writer row lock the head query took (transaction 1)."""
        if not head.writer_held:
            self._rollback(conn, head)
            raise LockLost("transaction 1 refused: this session does not hold the writer lock")
        preloaded = None
        if self.lookahead is not None:
            preloaded = self.lookahead.states_for(conn, msg, routing.preloadable_flids, self._decode_ahead)
        routed = routing.decide(conn, msg, head.msg_id, preloaded,
                                before_read=lambda concerns: self._send_behind(conn, concerns))
        if routed.decision.alert:
            log.error("ALERT mailbox id %s %s: %s", head.msg_id, msg.meta.type_styp, routed.decision.alert)
        return routed

    def write_state(self, conn: Connection, head: QueueHead, msg: SisMessage,
                    routed: routing.Routed, now: datetime) -> list[FlightState]:
        """The decision's flight states, its plans and the unreleased outbox events (INV-17b).

        Identity (INV-9, D26) is checked optimistically: binding it is part of the guarded status
        write, and a binding held by another row inside the window refuses it, which rolls the whole
        transaction back before the clash is classified. One round trip less per message."""
        msg_id = head.msg_id
        states, events, shown = next_states(routed, msg_id, msg.meta, BridgeReader(conn, msg_id),
                                            replayed=head.replayed)
        decision = routed.decision
        if not decision.plans:      # before the first write (item 8); with plans, ``insert`` checks each row once
            outbox.check_record_sizes(events, self.max_record_bytes)
        if self._holds_back(head, decision):       # written with the group's other messages (P13)
            assert self.behind is not None and self.lookahead is not None
            self.behind.hold(msg_id, states, routed.flights, events)
            self.lookahead.wrote(conn, states)
            return shown
        self._send_behind(conn)
        if self.lookahead is not None:      # what it writes is read again by the next message (P11)
            self.lookahead.written((st.flid for st in states), plans=bool(decision.plans))
        # one commit for both transactions (P8): the events are written released, as the terminal
        # status write would release them in the same commit (P25)
        released_at = now if self.folds_transactions else None
        with pipelined(conn):        # the writes travel together: one round trip, not one each
            FlightRepository(conn).persist_next_states(states, now=now, previous=routed.flights)
            if not decision.plans:
                outbox.insert(conn, events, released_at=released_at)
                events = []
        # plan writers read their own results (ledger CAS): not pipelined
        planned = write_plans(conn, decision.plans, msg_id, now)
        # each row, the events' too, checked as it is written (a snapshot's are built then):
        # RecordTooLarge aborts the statement, and the rollback undoes the flights and the plans
        outbox.insert(conn, [*events, *planned] if events else planned, released_at=released_at,
                      limit=self.max_record_bytes)
        # a plan writes flights of its own: the post-commit step then reads every flight the
        # message's events name instead of only the changed ones; a silent write (F6) has no event
        # and nothing for the projection
        return [] if decision.plans else shown

    def _holds_back(self, head: QueueHead, decision: Decision) -> bool:
        """A message of the group that writes no plans hands its writes to the write-behind (P13;
        with two transactions, P16); plans read their own writes, so they are sent at once."""
        return (self.behind is not None and self.lookahead is not None and self.group is not None
                and self.group.joins(head.msg_id) and not decision.plans)

    def _send_behind(self, conn: Connection, concerns: Callable[[FlightState], bool] | None = None) -> None:
        """Write what the write-behind holds (P13); with ``concerns``, only when a held flight
        passes it (a read of other flights cannot see the held writes). Refused (an identity
        already bound, a lost lock, any error), the group is rolled back and redone one message at
        a time (P10), where each refusal is classified as before; a lost session goes to the pump."""
        behind = self.behind
        if behind is None or not behind.concerns(concerns):
            return
        last = max([*behind.msg_ids, *(i for i, _ in self.group.pending)] if self.group else behind.msg_ids)
        try:
            behind.write(conn, now=self.clock.now(), pid=_pid(conn), window=self.identity_window)
        except Exception as exc:
            _rollback(conn)
            if self.lookahead is not None:
                self.lookahead.reset()
            if self.group is None or conn.invalidated:
                self.discard_group()
                raise
            self._applied.clear()        # rolled back with the group (P12)
            log.info("the group's held writes were refused (%s: %s)", type(exc).__name__, safe_text(str(exc)[:200]))
            raise self.group.abort(last) from exc

    def commit_applied(self, conn: Connection, head: QueueHead, msg: SisMessage, now: datetime) -> None:
        """``applied_at`` and the identity binding, guarded; transaction 1 commits."""
        self.mark_applied(conn, head, msg, now)
        faults.reach("before_tx1_commit")
        conn.commit()

    def mark_applied(self, conn: Connection, head: QueueHead, msg: SisMessage, now: datetime) -> None:
        """``applied_at`` and the identity binding, guarded (transaction 1 stays open)."""
        if not queue.mark_applied(conn, head.msg_id, now=now, bind=self._bind(msg), msg_type=msg.meta.type,
                                  msg_styp=msg.meta.styp, pid=_pid(conn)):
            self._rollback(conn, head)
            raise LockLost(f"mailbox id {head.msg_id} is no longer open or already applied; "
                           "transaction 1 rolled back")

    def post_commit_steps(self, conn: Connection, msg_id: int, states: Sequence[FlightState]) -> None:
        """The hooks between the transactions (INV-17b: terminal only after they succeed)."""
        if not self.post_commit:
            return
        states = self._hook_states(conn, msg_id, states)
        conn.commit()
        for hook in self.post_commit:
            hook(conn, msg_id, states)

    @staticmethod
    def _hook_states(conn: Connection, msg_id: int, states: Sequence[FlightState]) -> Sequence[FlightState]:
        """What a message's post-commit step sees: the states it changed, or, when it had plans
        (none returned), every flight its events name, as stored."""
        if states:
            return states
        return list(FlightRepository(conn).load(outbox.flids_of(conn, msg_id)).values())

    def _post_commit_group(self, conn: Connection, batch: list[tuple[QueueHead, Sequence[FlightState]]]
                           ) -> tuple[int, tuple[QueueHead, Exception] | None]:
        """The post-commit steps of a committed group, in id order: how many messages finished
        them, and the first that failed with its error. Hooks that take a whole group (``many``,
        the Redis projection: one round trip, P16) get it at once, and a failure is then the first
        message's (D22: it waits, the rest stay applied and open behind it); others go message by
        message."""
        batched = [getattr(hook, "many", None) for hook in self.post_commit]
        if not all(batched):
            for done, (head, states) in enumerate(batch):
                faults.reach("between_tx1_tx2")
                try:
                    self.post_commit_steps(conn, head.msg_id, states)
                except Exception as exc:
                    _rollback(conn)
                    return done, (head, exc)
            return len(batch), None
        for _ in batch:
            faults.reach("between_tx1_tx2")
        try:
            if batched:
                group = [(head.msg_id, self._hook_states(conn, head.msg_id, states)) for head, states in batch]
                conn.commit()
                for many in batched:
                    assert many is not None
                    many(conn, group)
        except Exception as exc:
            _rollback(conn)
            return 0, (batch[0][0], exc)
        return len(batch), None

    # --- verdicts and failures ---------------------------------------------------------------
    def _verdict(self, conn: Connection, head: QueueHead, msg: SisMessage, decision: Decision) -> Terminal:
        """A handler's SKIPPED or DEAD; the identity is checked first (a duplicate stays a duplicate),
        and before it the tree checks decode left to the helper (P32)."""
        refused = _tree_refused(msg)
        if refused is not None:
            return refused
        other = self._bound_elsewhere(conn, head, msg)
        if other is not None:
            return self._identity_clash(head, msg, other)
        if decision.outcome == DEAD:
            return Terminal(Status.DEAD, decision.reason, decision.detail, ErrorClass.MALFORMED, msg=msg)
        return Terminal(Status.SKIPPED, decision.reason, decision.detail, msg=msg,
                        bind=decision.reason == "unsupported")

    @staticmethod
    def _identity_clash(head: QueueHead, msg: SisMessage, other: identity.Binding) -> Terminal:
        """Same SNDR|TYPE|STYP|SEQN already bound to another row (INV-9): same content is a
        duplicate, other content a conflict; neither has any business effect. The stored hash and
        the newer one may be of either kind (P28: by body size, and bindings from before P28 hold
        the first kind); ``same_content`` hashes the newer body in the stored one's kind."""
        if same_content(other.payload_hash, msg.payload_hash, msg.root):
            return Terminal(Status.SKIPPED, "duplicate", msg=msg, bind=False, dup_of=other.msg_id)
        log.error("ALERT identity conflict: %s of mailbox id %s already bound to id %s with other content",
                  msg.meta.identity, head.msg_id, other.msg_id)
        return Terminal(Status.SKIPPED, "identity_conflict",
                        f"{msg.meta.identity} bound to mailbox id {other.msg_id} with other content",
                        msg=msg, bind=False, dup_of=other.msg_id)

    def _classify(self, conn: Connection, head: QueueHead, step: Step, msg: SisMessage | None,
                  exc: Exception) -> Outcome:
        """The one place a failure is classified. Raises what is not the message's fault: a lost
        PostgreSQL session or writer lock (the pump reconnects), any error reading the queue."""
        if isinstance(exc, SourceUnavailable):      # the mailbox, not the message: wait, no attempt
            return SourceWait(exc)
        if isinstance(exc, DecoderCrash):           # a decoder defect, not a verdict on the message: retried
            log.exception("decoder error on mailbox id %s", head.msg_id, exc_info=exc.error)
            return Failed(ErrorClass.CODEC_ERROR, exc.error)
        if isinstance(exc, GroupAborted):
            raise exc
        if step == Step.READ_AND_DECODE:            # reading the queue failed: the pump decides
            raise exc
        self._rollback(conn, head, quiet=True)
        if isinstance(exc, LockLost) or (isinstance(exc, SQLAlchemyError) and is_disconnect(exc)):
            raise exc
        if step == Step.POST_COMMIT:
            return self._projection_wait(head, exc)
        if isinstance(exc, SisRefused):             # the helper's tree checks (P32): rolled back, as decode's
            return _dead(exc)
        refused = _tree_refused(msg) if msg is not None else None
        if refused is not None:                     # a tree decode would have refused: whatever failed on it
            return refused
        if isinstance(exc, outbox.RecordTooLarge) and msg is not None:   # rolled back: nothing written
            return self._verdict(conn, head, msg, Decision.dead("oversize", str(exc)))
        if isinstance(exc, identity.IdentityTaken) and msg is not None:
            other = self._bound_elsewhere(conn, head, msg)
            return self._identity_clash(head, msg, other) if other is not None else Failed(ErrorClass.INFRA, exc)
        if isinstance(exc, SQLAlchemyError):
            return Failed(ErrorClass.INFRA, exc)
        log.exception("handler error on mailbox id %s", head.msg_id)
        return Failed(ErrorClass.HANDLER_ERROR, exc)

    # --- recording: the guarded status writes -------------------------------------------------
    def _record(self, conn: Connection, head: QueueHead, outcome: Outcome) -> StepResult:
        """Write the outcome with the guarded status statement, and commit."""
        if isinstance(outcome, Terminal) and outcome.applied_at is not None:
            # Folded: this commit is transaction 1's too, so its failure is a transaction-1
            # failure (an identity clash surfaces here, through the unique constraint).
            try:
                return self.commit_terminal(conn, head, outcome)
            except Exception as exc:
                outcome = self._classify(conn, head, Step.WRITE_STATE, outcome.msg, exc)
        if isinstance(outcome, SourceWait):
            return self._source_wait(conn, head, outcome.exc)
        if isinstance(outcome, Wait):
            return self._wait(conn, head, outcome)
        if isinstance(outcome, Failed):
            return self._failure(conn, head, outcome)
        if isinstance(outcome, Applied):
            return self._join_applied(conn, head, outcome)
        return self.commit_terminal(conn, head, outcome)

    def _join_applied(self, conn: Connection, head: QueueHead, applied: Applied) -> StepResult:
        """An applied message joins the open group (P12); counted once its terminal status commits."""
        assert self.group is not None
        result = StepResult(StepKind.PROCESSED, head.msg_id, Status.SUCCEEDED, deferred=True)
        self._applied[head.msg_id] = (head, applied.states)
        if self.group.add(head.msg_id, result):
            self._commit(conn)
        return result

    def _finish_applied(self, conn: Connection, pending: list[tuple[int, StepResult]]) -> None:
        """The group's transaction 1 has committed: the post-commit steps in id order (a hook that
        takes the whole group gets it in one call, P16), then the terminal statuses of the
        messages that passed them in one transaction 2, one statement (P12, P16). A post-commit
        step that fails (Redis down) makes that message wait as D22 says (FAILED, PROJECTION,
        backoff); the messages after it stay applied and open behind it, and the head path
        finishes them without applying their state again (INV-20b)."""
        group = self.group
        assert group is not None
        applied, self._applied = self._applied, {}
        done, failed = self._post_commit_group(conn, [applied[msg_id] for msg_id, _ in pending])
        finished = [(applied[msg_id][0], result) for msg_id, result in pending[:done]]
        if finished:
            self._finish_terminal(conn, [head.msg_id for head, _ in finished])
            self._released()
        for head, result in finished:
            self.source.forget(head.msg_id)
            group.committed.append(result)
            faults.reach("after_tx2")
        if failed is not None:
            waiting, error = failed
            self._wait(conn, waiting, self._projection_wait(waiting, error))

    def _finish_terminal(self, conn: Connection, msg_ids: list[int]) -> None:
        """Transaction 2 of a group's applied messages, one guarded statement (P16): refused (a row
        no longer open, the writer lock lost), it is rolled back and the pump reconnects."""
        try:
            ok = queue.finish_applied(conn, msg_ids, now=self.clock.now(), pid=_pid(conn))
        except SQLAlchemyError:
            _rollback(conn)
            raise
        if not ok:
            _rollback(conn)
            raise LockLost(f"the terminal statuses of mailbox ids {msg_ids[0]}..{msg_ids[-1]} were refused: a row "
                           "is not open or this session lost the writer lock")
        conn.commit()

    def commit_terminal(self, conn: Connection, head: QueueHead, t: Terminal,
                        attempts: int | None = None) -> StepResult:
        """Transaction 2: terminal status, history, backfill todo and event release, one statement
        (held back with the group's others when the write-behind holds the message's writes, P13)."""
        group = self.group if self.folds_transactions else None
        deferred = group is not None and group.joins(head.msg_id)
        behind = self.behind
        if deferred and behind is not None and head.msg_id in behind.msg_ids and t.msg is not None and t.applied_at:
            behind.hold_status(_applied_row(head, t.msg, t.applied_at))
        else:
            self._write_terminal(conn, head, t, attempts, commit=not deferred)
        if t.status == Status.DEAD:
            log.error("ALERT dead letter: mailbox id %s %s (%s)", head.msg_id, t.reason, safe_text(t.detail or ""))
        result = StepResult(StepKind.PROCESSED, head.msg_id, t.status, t.reason, deferred=deferred)
        if group is not None and deferred:
            if group.add(head.msg_id, result):
                self._commit(conn)
            return result
        self.source.forget(head.msg_id)
        self._released()
        faults.reach("after_tx2")
        return result

    def _write_terminal(self, conn: Connection, head: QueueHead, t: Terminal, attempts: int | None, *,
                        commit: bool) -> None:
        """The guarded terminal status statement of one message (with its identity binding)."""
        now = self.clock.now()
        values: dict[str, object] = {
            "status": t.status, "reason": t.reason, "error_detail": t.detail, "terminal_at": now,
            "updated_at": now, "next_attempt_at": None, "dup_of": t.dup_of}
        if t.applied_at is not None:
            values["applied_at"] = t.applied_at
        if t.error_class is not None:
            values["error_class"] = t.error_class
        if attempts is not None:
            values["attempts"] = attempts
        bind = None
        if t.msg is not None:
            values.update(msg_type=t.msg.meta.type, msg_styp=t.msg.meta.styp, payload_hash=t.msg.payload_hash)
            if t.bind:
                values["identity_key"] = t.msg.meta.identity
                bind = self._bind(t.msg)
        self._status_write(conn, head, values, terminal=True, now=now, history=HistoryRow(
            t.status, t.reason, t.error_class, t.detail, attempts), bind=bind, commit=commit)

    def _failure(self, conn: Connection, head: QueueHead, failed: Failed) -> StepResult:
        """A failed attempt: backoff 1, 2, 4, 8, 16 s, or DEAD(exhausted) (US-03 AC4/AC5)."""
        now = self.clock.now()
        attempts = head.attempts + 1
        detail = f"{type(failed.exc).__name__}: {failed.exc}"[:2000]
        if self.policy.exhausted(attempts, head.deadline_from, now):
            return self.commit_terminal(conn, head, Terminal(Status.DEAD, "exhausted", detail, failed.error_class),
                                        attempts=attempts)
        next_at = self.policy.next_attempt_at(attempts, now)
        self._status_write(conn, head, {
            "status": Status.FAILED, "attempts": attempts, "next_attempt_at": next_at,
            "error_class": failed.error_class, "error_detail": detail, "updated_at": now}, terminal=False,
            now=now, history=HistoryRow(Status.FAILED, None, failed.error_class, detail, attempts))
        return StepResult(StepKind.PROCESSED, head.msg_id, Status.FAILED, failed.error_class, wait_until=next_at)

    # --- waits: open, no attempt used (D22, D24) ---------------------------------------------
    def _projection_wait(self, head: QueueHead, exc: Exception) -> Wait:
        """The post-commit projection failed (D22, INV-23, INV-17b): transaction 1 stands, the
        message stays open and retries, backoff doubling from when it was applied and capped at
        30 s, for as long as it takes; one alert when the wait passes 60 s. Never DEAD."""
        now = self.clock.now()
        applied = head.applied_at or now
        waited = (now - applied).total_seconds()
        before = (head.updated_at - applied).total_seconds() if head.applied_at and head.updated_at else 0.0
        detail = f"{type(exc).__name__}: {exc}"[:2000]
        log.warning("mailbox id %s waits for its projection (%.0f s so far): %s", head.msg_id, waited,
                    safe_text(detail))
        alert = None
        if waited >= self.policy.wait_alert_s > before:
            alert = (f"mailbox id {head.msg_id} has waited {waited:.0f} s for the Redis projection; the queue "
                     f"behind it waits too ({detail})")
        return Wait(ErrorClass.PROJECTION, detail, self.policy.wait_delay(waited), alert)

    def _vanished(self, head: QueueHead) -> Wait:
        """The registered mailbox row is gone (C-12, D24): not the message's verdict, so it stays
        open at the head, uses no attempt, is looked for again every 30 s, and is resolved by an
        operator (an audited skip or replay). The alert fires when it is first found missing."""
        self.source.forget(head.msg_id)          # look in the mailbox again next time
        first = head.error_class != ErrorClass.SOURCE_MISSING
        detail = "the mailbox row vanished before processing; an operator resolves it (msgx skip / msgx replay)"
        alert = f"mailbox id {head.msg_id}: {detail}; the queue behind it waits" if first else None
        return Wait(ErrorClass.SOURCE_MISSING, detail, self.policy.wait_cap_s, alert)

    def _wait(self, conn: Connection, head: QueueHead, wait: Wait) -> StepResult:
        """Record a wait: FAILED (open) with its class, the same attempts, the next look due."""
        now = self.clock.now()
        next_at = now + timedelta(seconds=wait.delay_s)
        self._status_write(conn, head, {
            "status": Status.FAILED, "next_attempt_at": next_at, "error_class": wait.error_class,
            "error_detail": wait.detail, "updated_at": now}, terminal=False, now=now,
            history=HistoryRow(Status.FAILED, None, wait.error_class, wait.detail, head.attempts))
        if wait.alert:
            log.error("ALERT %s", wait.alert)
        kind = StepKind.WAIT_OPERATOR if wait.error_class == ErrorClass.SOURCE_MISSING else StepKind.WAIT_BACKOFF
        return StepResult(kind, head.msg_id, Status.FAILED, wait.error_class, wait_until=next_at)

    def _source_wait(self, conn: Connection, head: QueueHead, exc: SourceUnavailable) -> StepResult:
        """The mailbox is down and the head's body is not cached: wait, note it, use no attempt."""
        now = self.clock.now()
        log.warning("mailbox id %s waits for the mailbox: %s", head.msg_id, safe_text(exc))
        queue.note_error(conn, head.msg_id, ErrorClass.SOURCE_UNAVAILABLE, str(exc), now)
        self._commit(conn)
        return StepResult(StepKind.WAIT_SOURCE, head.msg_id, wait_until=now + timedelta(seconds=SOURCE_RETRY_S))

    def _status_write(self, conn: Connection, head: QueueHead, values: dict[str, object], *, terminal: bool,
                      now: datetime, history: HistoryRow, bind: queue.Bind | None = None, commit: bool = True) -> None:
        """One guarded statement, then commit (unless the group commits it, P10): the row must
        still be open and this session must hold the writer lock (OPS-1), else ``LockLost``; an
        identity bound elsewhere inside the window raises ``IdentityTaken`` (rolled back,
        classified by the caller)."""
        msg_id = head.msg_id
        try:
            if not queue.write_status(conn, msg_id, values, terminal=terminal, history=history, now=now,
                                      pid=_pid(conn), bind=bind):
                self._rollback(conn, head)
                raise LockLost(f"status write for mailbox id {msg_id} refused: the row is not open or "
                               "this session lost the writer lock")
            if commit:
                self._commit(conn)
        except (SQLAlchemyError, identity.IdentityTaken):
            self._rollback(conn, head, quiet=True)
            raise

    # --- transactions and the group commit (P10) -----------------------------------------------
    def _commit(self, conn: Connection) -> None:
        """Commit, and with it the open group: its messages are now terminal for good (their
        bodies are dropped, the ``after_tx2`` fault step is reached once per message)."""
        self._send_behind(conn)
        conn.commit()
        if self.lookahead is not None:
            self.lookahead.reset()
        group = self.group
        if group is not None and group.pending and self._applied:
            pending = list(group.pending)
            group.pending.clear()
            self._finish_applied(conn, pending)
        elif group is not None and group.pending:
            self._released()
            for msg_id, result in group.pending:
                self.source.forget(msg_id)
                group.committed.append(result)
                faults.reach("after_tx2")
            group.pending.clear()

    def _released(self) -> None:
        """A commit made messages terminal, releasing their events: tell the inline dispatcher."""
        if self.on_release is not None:
            self.on_release()

    def _rollback(self, conn: Connection, head: QueueHead, *, quiet: bool = False) -> None:
        """Roll the transaction back (``quiet``: a broken session's rollback error is ignored).
        With an open group that would undo finished messages before the head too, so the group is
        abandoned (``GroupAborted``) and redone one commit at a time (P10)."""
        if quiet:
            _rollback(conn)
        else:
            conn.rollback()
        if self.lookahead is not None:
            self.lookahead.reset()
        self._applied.clear()        # an open group's applied messages were rolled back with it
        if self.behind is not None:
            self.behind.clear()
        if self.group is not None and self.group.pending:
            if conn.invalidated:        # the session is gone, the group with it: the caller's error
                self.group.discard()    # (a disconnect) goes to the pump, which reconnects
                return
            raise self.group.abort(head.msg_id)

    def flush(self, conn: Connection) -> None:
        """Commit the open group, if any (the pump calls it before marking the mailbox). A group
        whose held writes are refused is rolled back here; the pump's next pass redoes it."""
        try:
            if self.group is not None and self.group.pending:
                self._commit(conn)
        except GroupAborted as exc:
            log.info("%s", exc)
        finally:
            gc_pause.resume()      # the group's commit and post-commit steps were part of its messages (P20)

    def committed(self) -> list[StepResult]:
        """The grouped results committed since the last call (the pump counts them)."""
        return self.group.take() if self.group is not None else []

    def discard_group(self) -> None:
        """The session was lost: an open group died with it, uncommitted (it is processed again)."""
        self._applied.clear()
        if self.behind is not None:
            self.behind.clear()
        if self.group is not None:
            self.group.discard()

    # --- identity (INV-9, D26) ------------------------------------------------------------------
    def _bind(self, msg: SisMessage) -> queue.Bind:
        return queue.Bind(msg.meta.identity, msg.payload_hash, self.identity_window)

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

    def _ignored_by(self, meta: Meta) -> str | None:
        """US-04: case-insensitive TYPE-STYP / TYPE-* rules, checked before identity binding."""
        key = meta.type_styp.upper()
        for rule in self.ignore_rules:
            if fnmatch.fnmatchcase(key, rule.upper()):
                return rule
        return None


def next_states(routed: routing.Routed, msg_id: int, meta: Meta, bridges: Callable[[], BridgeMap | None] = lambda: None,
                *, replayed: bool = False) -> tuple[list[FlightState], list[OutboxRow], list[FlightState]]:
    """The decision's flight changes applied to the loaded states, last writer wins by ``msg_id``
    (F6): the states to write, their outbox events, and the states a reader sees change (for the
    projection). A change a reader does not see (every write equal or stale, or a deleted flight
    that stays deleted) is a silent write: stamps and hidden fields only, same version, no events;
    one that moves nothing at all is not written. A state whose stands changed (or that is new or
    restored) gets its airbridges derived (D27) from ``bridges()``, called at most once and only
    then: most messages never read the mapping. A message an operator replayed (``replayed``, US-10
    AC4: a stale replay is forced on purpose) lands on top of newer writes."""
    current = dict(routed.flights)
    states: list[FlightState] = []
    events: list[OutboxRow] = []
    shown: list[FlightState] = []
    for change in routed.decision.changes:
        before = current.get(change.flid)
        result = next_state(change, before, msg_id, override=replayed)
        if result is None:
            continue
        base = before or FlightState.new(change.flid)
        state = result.state
        if not result.visible(base):
            if (state.fields, state.stamps, state.deleted) == (base.fields, base.stamps, base.deleted):
                continue
            state = replace(state, state_version=base.state_version, last_message_id=base.last_message_id)
            current[change.flid] = state
            states.append(state)
            continue
        changed, cleared = result.changed, result.cleared
        rederived = needs_derivation(before, state)
        if rederived:
            state = derive(state, bridges() if stands_of(state) else None)
        if rederived or changed & STAND_KEYS:     # the derived keys may have moved with them
            derived, gone = document_changes(base, state)
            changed, cleared = changed | derived, cleared | gone
        current[change.flid] = state
        states.append(state)
        shown.append(state)
        own = outbox.change_events(msg_id, meta, state, changed, cleared)
        if codeshare.announced_by_master(before, state, current):   # decision L6: its master's msg tells it
            own = [e for e in own if e.topic != outbox.TOPIC_MSG]
        events += own
    return states, events, shown


def _applied_row(head: QueueHead, msg: SisMessage, applied_at: datetime) -> queue.Applied:
    """A held message's status row for the write-behind (P13, P16)."""
    return queue.Applied(head.msg_id, applied_at, msg.meta.type, msg.meta.styp, msg.payload_hash, msg.meta.identity)


def _pid(conn: Connection) -> int:
    """The backend pid that took the writer lock on this connection (-1: none, every guard fails)."""
    return writer_pid(conn) or -1


def _dead(refused: SisRefused) -> Terminal:
    """DEAD as the decoder refused the body: never bound, nothing of it written."""
    return Terminal(Status.DEAD, refused.reason, refused.detail, ErrorClass.MALFORMED)


def _tree_refused(msg: SisMessage) -> Terminal | None:
    """DEAD when the tree checks decode left to the helper (P32) refuse ``msg``, made here: on the
    paths that end a message without writing it, which the helper's verdict is not worth a wait."""
    refused = msg.refusal(here=True)
    return _dead(refused) if refused is not None else None


def _rollback(conn: Connection) -> None:
    try:
        conn.rollback()
    except DBAPIError:
        pass
