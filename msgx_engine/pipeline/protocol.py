"""The processing protocol for the queue head (DESIGN §2 steps 2-9).

Transaction 1 writes state, outbox events (not yet releasable) and ``applied_at``; then the
post-commit hooks run (the Redis projection); transaction 2 writes the terminal status, the
backfill todo and releases the events. A message found with ``applied_at`` set is not applied
again: only the remaining steps run (INV-20b).
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from sqlalchemy import Connection, and_, func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from msgx_engine.handlers.decision import APPLY, DEAD, Decision
from msgx_engine.handlers.router import decide, prepare
from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.pipeline import faults
from msgx_engine.pipeline.clock import Clock
from msgx_engine.pipeline.events import build_events
from msgx_engine.pipeline.policy import RetryPolicy
from msgx_engine.sis.decode import MAX_BODY_BYTES, SisMessage, SisRefused, decode
from msgx_engine.state.model import FlightState, apply
from msgx_engine.store.flights import FlightRepository
from msgx_engine.store.tables import (
    WRITER_LOCK_ROW,
    backfill_todo,
    intake_gap,
    msg_event,
    pipeline_lock,
    proc_state,
    proc_state_hst,
)

log = logging.getLogger(__name__)

SUCCEEDED, SKIPPED, FAILED, PENDING = "SUCCEEDED", "SKIPPED", "FAILED", "PENDING"
DEAD_STATUS = "DEAD"
TERMINAL = (SUCCEEDED, SKIPPED, DEAD_STATUS)
OPEN = (PENDING, FAILED)

# A post-commit hook gets the transaction-1 outcome (touched states) and may raise to keep the
# message non-terminal (it is then retried; the state is not applied twice).
PostCommitHook = Callable[[Connection, int, Sequence[FlightState]], None]


@dataclass
class StepResult:
    kind: str                          # processed | idle | wait_backoff | wait_gap
    msg_id: int | None = None
    status: str | None = None
    reason: str | None = None
    wait_until: datetime | None = None


@dataclass
class Processor:
    mailbox: Mailbox
    clock: Clock
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    ignore_rules: tuple[str, ...] = ("LDM-*", "RSTA-*")
    gap_grace_s: float = 5.0
    max_body_bytes: int = MAX_BODY_BYTES
    post_commit: list[PostCommitHook] = field(default_factory=list)

    # --- queue head ------------------------------------------------------------------------
    def head(self, conn: Connection):
        return conn.execute(
            select(proc_state).where(proc_state.c.status.in_(OPEN)).order_by(proc_state.c.msg_id).limit(1)
        ).first()

    def step(self, conn: Connection) -> StepResult:
        """Process the queue head once if it is due. Never lets a larger id overtake it (INV-3)."""
        head = self.head(conn)
        if head is None:
            conn.commit()
            return StepResult("idle")
        now = self.clock.now()
        gap = self._blocking_gap(conn, head.msg_id, now)
        if gap is not None:
            conn.commit()
            return StepResult("wait_gap", head.msg_id, wait_until=gap)
        if head.next_attempt_at is not None and head.next_attempt_at > now:
            conn.commit()
            return StepResult("wait_backoff", head.msg_id, wait_until=head.next_attempt_at)
        conn.commit()
        return self.process(conn, head)

    def _blocking_gap(self, conn: Connection, head_id: int, now: datetime) -> datetime | None:
        """A missing smaller id younger than the grace holds the head; older ones are passed."""
        open_gaps = and_(intake_gap.c.msg_id < head_id, intake_gap.c.passed_at.is_(None),
                         intake_gap.c.arrived_at.is_(None))
        oldest_young = conn.execute(
            select(func.max(intake_gap.c.first_seen_at)).where(open_gaps)).scalar()
        if oldest_young is None:
            return None
        until = oldest_young + timedelta(seconds=self.gap_grace_s)
        if until > now:
            return until
        passed = conn.execute(update(intake_gap).where(open_gaps).values(passed_at=now))
        if passed.rowcount:
            log.warning("passed %s expired gap(s) below mailbox id %s", passed.rowcount, head_id)
        return None

    # --- one message -----------------------------------------------------------------------
    def process(self, conn: Connection, head) -> StepResult:
        msg_id = head.msg_id
        if head.applied_at is not None:
            return self._after_apply(conn, msg_id, [], head)
        body = self.mailbox.bodies([msg_id]).get(msg_id)
        if body is None:
            return self._finish(conn, msg_id, DEAD_STATUS, "missing", "mailbox row vanished before processing")
        try:
            msg = decode(body, max_bytes=self.max_body_bytes)
        except SisRefused as exc:
            return self._finish(conn, msg_id, DEAD_STATUS, exc.reason, exc.detail, error_class="CODEC_ERROR")
        rule = self._ignored_by(msg)
        if rule is not None:
            return self._finish(conn, msg_id, SKIPPED, f"ignored:{rule}", None, msg=msg, bind=False)
        other = conn.execute(select(proc_state.c.msg_id, proc_state.c.payload_hash).where(
            proc_state.c.identity_key == msg.meta.identity, proc_state.c.msg_id != msg_id)).first()
        conn.commit()
        if other is not None:
            if other.payload_hash == msg.payload_hash:
                return self._finish(conn, msg_id, SKIPPED, "duplicate", None, msg=msg, bind=False,
                                    dup_of=other.msg_id)
            log.error("ALERT identity conflict: %s of mailbox id %s already bound to id %s with other content",
                      msg.meta.identity, msg_id, other.msg_id)
            return self._finish(conn, msg_id, SKIPPED, "identity_conflict", None, msg=msg, bind=False,
                                dup_of=other.msg_id)
        try:
            outcome = self._transaction_1(conn, msg_id, msg)
        except SQLAlchemyError as exc:
            self._rollback(conn)
            return self._failure(conn, head, "INFRA", exc)
        except Exception as exc:  # a handler or engine defect: retried, then dead-lettered
            self._rollback(conn)
            log.exception("handler error on mailbox id %s", msg_id)
            return self._failure(conn, head, "HANDLER_ERROR", exc)
        if isinstance(outcome, Decision):
            if outcome.outcome == DEAD:
                return self._finish(conn, msg_id, DEAD_STATUS, outcome.reason, outcome.detail, msg=msg, bind=False)
            return self._finish(conn, msg_id, SKIPPED, outcome.reason, outcome.detail, msg=msg,
                                bind=outcome.reason == "unsupported")
        faults.reach("between_tx1_tx2")
        return self._after_apply(conn, msg_id, outcome, head)

    def _ignored_by(self, msg: SisMessage) -> str | None:
        key = msg.meta.type_styp
        for rule in self.ignore_rules:
            if fnmatch.fnmatchcase(key.upper(), rule.upper()):
                return rule
        return None

    def _transaction_1(self, conn: Connection, msg_id: int, msg: SisMessage) -> list[FlightState] | Decision:
        conn.execute(select(pipeline_lock.c.name).where(pipeline_lock.c.name == WRITER_LOCK_ROW).with_for_update())
        repo = FlightRepository(conn)
        ctx = prepare(conn, msg)
        current = ctx.flights
        decision = decide(msg, ctx)
        if decision.outcome != APPLY:
            conn.rollback()
            return decision
        next_states: list[FlightState] = []
        events: list[dict] = []
        for change in decision.changes:
            before = current.get(change.flid)
            if before is None and not change.create:
                continue
            base = before or FlightState.new(change.flid)
            result = apply(base, change.commands, message_id=msg_id, fday=change.fday, undelete=change.undelete)
            state = result.state
            if change.delete:
                state = replace(state, deleted=True)
            current[change.flid] = state
            next_states.append(state)
            events += build_events(msg_id, msg, state, result.changed, result.cleared)
        repo.persist_next_states(next_states)
        for effect in decision.effects:
            events += effect.apply(conn, msg_id, self.clock.now()) or []
        if events:
            conn.execute(insert(msg_event), events)
        now = self.clock.now()
        conn.execute(update(proc_state).where(proc_state.c.msg_id == msg_id).values(
            applied_at=now, updated_at=now, identity_key=msg.meta.identity, payload_hash=msg.payload_hash,
            msg_type=msg.meta.type, msg_styp=msg.meta.styp))
        faults.reach("before_tx1_commit")
        conn.commit()
        return next_states

    def _after_apply(self, conn: Connection, msg_id: int, states: Sequence[FlightState], head) -> StepResult:
        try:
            if self.post_commit:
                if not states:
                    states = self._touched_states(conn, msg_id)
                for hook in self.post_commit:
                    hook(conn, msg_id, states)
        except Exception as exc:
            self._rollback(conn)
            log.warning("post-commit step failed for mailbox id %s: %s", msg_id, exc)
            return self._failure(conn, head, "INFRA", exc)
        return self._finish(conn, msg_id, SUCCEEDED, None, None)

    def _touched_states(self, conn: Connection, msg_id: int) -> list[FlightState]:
        flids = [r[0] for r in conn.execute(select(msg_event.c.flid).where(msg_event.c.msg_id == msg_id).distinct())]
        states = list(FlightRepository(conn).load(flids).values())
        conn.commit()
        return states

    # --- terminal and failure paths ----------------------------------------------------------
    def _finish(self, conn: Connection, msg_id: int, status: str, reason: str | None, detail: str | None, *,
                msg: SisMessage | None = None, bind: bool = True, dup_of: int | None = None,
                error_class: str | None = None) -> StepResult:
        """Transaction 2: terminal status, backfill todo, release the message's events."""
        now = self.clock.now()
        values: dict = {"status": status, "reason": reason, "error_detail": detail, "terminal_at": now,
                        "updated_at": now, "next_attempt_at": None, "dup_of": dup_of}
        if error_class is not None:
            values["error_class"] = error_class
        if msg is not None:
            values.update(msg_type=msg.meta.type, msg_styp=msg.meta.styp, payload_hash=msg.payload_hash)
            if bind:
                values["identity_key"] = msg.meta.identity
        try:
            conn.execute(update(proc_state).where(proc_state.c.msg_id == msg_id).values(**values))
            conn.execute(insert(proc_state_hst).values(msg_id=msg_id, status=status, reason=reason,
                                                       error_class=error_class, error_detail=detail, at=now))
            conn.execute(_upsert_todo(msg_id, now))
            conn.execute(update(msg_event).where(msg_event.c.msg_id == msg_id, msg_event.c.released_at.is_(None))
                         .values(released_at=now))
            conn.commit()
        except SQLAlchemyError:
            self._rollback(conn)
            raise
        faults.reach("after_tx2")
        if status == DEAD_STATUS:
            log.error("ALERT dead letter: mailbox id %s %s (%s)", msg_id, reason, detail)
        return StepResult("processed", msg_id, status, reason)

    def _failure(self, conn: Connection, head, error_class: str, exc: BaseException) -> StepResult:
        now = self.clock.now()
        attempts = head.attempts + 1
        detail = f"{type(exc).__name__}: {exc}"[:2000]
        if self.policy.exhausted(attempts, head.created_at, now):
            conn.execute(update(proc_state).where(proc_state.c.msg_id == head.msg_id).values(attempts=attempts))
            return self._finish(conn, head.msg_id, DEAD_STATUS, "exhausted", detail, error_class=error_class)
        next_at = self.policy.next_attempt_at(attempts, now)
        conn.execute(update(proc_state).where(proc_state.c.msg_id == head.msg_id).values(
            status=FAILED, attempts=attempts, next_attempt_at=next_at, error_class=error_class,
            error_detail=detail, updated_at=now))
        conn.execute(insert(proc_state_hst).values(msg_id=head.msg_id, status=FAILED, error_class=error_class,
                                                   error_detail=detail, attempt=attempts, at=now))
        conn.commit()
        return StepResult("processed", head.msg_id, FAILED, error_class, wait_until=next_at)

    @staticmethod
    def _rollback(conn: Connection) -> None:
        try:
            conn.rollback()
        except DBAPIError:
            pass


def _upsert_todo(msg_id: int, now: datetime):
    return pg_insert(backfill_todo).values(msg_id=msg_id, status="PENDING", created_at=now).on_conflict_do_nothing(
        index_elements=["msg_id"])
