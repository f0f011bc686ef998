"""The processing protocol for the queue head (DESIGN §2 steps 2-9).

Transaction 1 writes state, outbox events (not yet releasable) and ``applied_at``; then the
post-commit hooks run (the Redis projection); transaction 2 writes the terminal status, the
backfill todo and releases the events. A message found with ``applied_at`` set is not applied
again: only the remaining steps run (INV-20b).

Every status write is one guarded statement (``status_write``): it changes nothing unless the
row is still open and this session holds the writer lock, and the terminal status, its history
row, the backfill todo and the event release commit in that same statement (INV-8).
Errors of the message go on its own record (US-03 AC5). Errors that are not the message's (the
PostgreSQL connection dropped, the writer lock was lost, the mailbox is unreachable) consume no
attempt: they propagate to the pump, or make the head wait.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import cache

from sqlalchemy import Connection, select, update
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from msgx_engine import faults
from msgx_engine.clock import Clock
from msgx_engine.db import is_disconnect, pipelined
from msgx_engine.handlers.decision import APPLY, DEAD, Decision
from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.pipeline import routing
from msgx_engine.pipeline.plans import write_plans
from msgx_engine.pipeline.policy import RetryPolicy
from msgx_engine.pipeline.source import BodySource, SourceUnavailable
from msgx_engine.pipeline.writer import LockLost, writer_pid
from msgx_engine.sis.decode import MAX_BODY_BYTES, Meta, SisMessage, SisRefused, decode
from msgx_engine.state.model import FlightState, apply
from msgx_engine.store import outbox
from msgx_engine.store.flights import FlightRepository
from msgx_engine.store.outbox import OutboxRow
from msgx_engine.store.tables import (
    WRITER_LOCK_ROW,
    intake_gap,
    msg_event,
    proc_state,
)

log = logging.getLogger(__name__)

SUCCEEDED, SKIPPED, FAILED, PENDING = "SUCCEEDED", "SKIPPED", "FAILED", "PENDING"
DEAD_STATUS = "DEAD"
TERMINAL = (SUCCEEDED, SKIPPED, DEAD_STATUS)
OPEN = (PENDING, FAILED)
SOURCE_RETRY_S = 2.0

# A post-commit hook gets the transaction-1 outcome (touched states) and may raise to keep the
# message non-terminal (it is then retried; the state is not applied twice).
PostCommitHook = Callable[[Connection, int, Sequence[FlightState]], None]


@dataclass
class StepResult:
    kind: str                          # processed | idle | wait_backoff | wait_gap | wait_source
    msg_id: int | None = None
    status: str | None = None
    reason: str | None = None
    wait_until: datetime | None = None


# The per-message statements as plain SQL sent with ``exec_driver_sql``: built once, no
# statement construction or compilation per message (DESIGN §6 pump budget).
# The head query also takes the writer row lock of transaction 1 (DESIGN §2 step 7): the
# transaction that applies the head starts here, so the lock costs no extra round trip.
_HEAD_SQL = (
    "WITH w AS (SELECT pg_backend_pid() = %(pid)s AS held FROM pipeline_lock WHERE name = %(name)s "
    "FOR UPDATE) "
    "SELECT p.*, (SELECT max(g.first_seen_at) FROM intake_gap g WHERE g.msg_id < p.msg_id "
    "AND g.passed_at IS NULL AND g.arrived_at IS NULL) AS gap_seen, (SELECT held FROM w) AS writer_held "
    "FROM proc_state p WHERE p.status IN ('PENDING', 'FAILED') ORDER BY p.msg_id LIMIT 1")
_IDENTITY_SQL = ("SELECT msg_id, payload_hash FROM proc_state WHERE identity_key = %(identity)s "
                 "AND msg_id <> %(msg_id)s LIMIT 1")
_APPLIED_SQL = (
    "UPDATE proc_state SET applied_at = %(now)s, updated_at = %(now)s, identity_key = %(identity)s, "
    "payload_hash = %(payload_hash)s, msg_type = %(msg_type)s, msg_styp = %(msg_styp)s "
    "WHERE msg_id = %(msg_id)s AND status IN ('PENDING', 'FAILED') AND applied_at IS NULL "
    "AND pg_backend_pid() = %(pid)s")
@cache
def _status_sql(columns: tuple[str, ...], terminal: bool) -> str:
    """The guarded status write for one set of columns (INV-8): the status, its history row and,
    when terminal, the backfill todo and the event release, all in one statement."""
    sets = ", ".join(f"{c} = %(v_{c})s" for c in columns)
    parts = [
        f"u AS (UPDATE proc_state SET {sets} WHERE msg_id = %(msg_id)s AND status IN ('PENDING', 'FAILED') "
        "AND pg_backend_pid() = %(pid)s RETURNING msg_id)",
        "h AS (INSERT INTO proc_state_hst (msg_id, status, reason, error_class, error_detail, attempt, at) "
        "SELECT msg_id, %(h_status)s::text, %(h_reason)s::text, %(h_error_class)s::text, "
        "%(h_error_detail)s::text, %(h_attempt)s::int, %(now)s::timestamptz FROM u)"]
    if terminal:
        parts += [
            "t AS (INSERT INTO backfill_todo (msg_id, status, created_at) "
            "SELECT msg_id, 'PENDING', %(now)s::timestamptz FROM u ON CONFLICT (msg_id) DO NOTHING)",
            "e AS (UPDATE msg_event SET released_at = %(now)s::timestamptz "
            "WHERE msg_id IN (SELECT msg_id FROM u) AND released_at IS NULL)"]
    return f"WITH {', '.join(parts)} SELECT count(*) FROM u"


def _identity_taken(exc: BaseException) -> bool:
    """The guarded write was refused because another row already holds this identity_key."""
    diag = getattr(getattr(exc, "orig", None), "diag", None)
    return getattr(diag, "constraint_name", None) == "proc_state_identity_key_key"


@dataclass
class Processor:
    mailbox: Mailbox
    clock: Clock
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    ignore_rules: tuple[str, ...] = ("LDM-*", "RSTA-*")
    gap_grace_s: float = 5.0
    max_body_bytes: int = MAX_BODY_BYTES
    post_commit: list[PostCommitHook] = field(default_factory=list)
    source: BodySource | None = None
    split_transactions: bool = False

    def __post_init__(self) -> None:
        if self.source is None:
            self.source = BodySource(self.mailbox)

    # --- queue head ------------------------------------------------------------------------
    def head(self, conn: Connection):
        """The smallest non-terminal id (INV-3), with ``gap_seen`` (the youngest open gap below it) and
        ``writer_held`` (this session holds the writer lock; the writer row is now locked)."""
        return conn.exec_driver_sql(_HEAD_SQL, {"pid": writer_pid(conn) or -1, "name": WRITER_LOCK_ROW}).first()

    def step(self, conn: Connection) -> StepResult:
        """Process the queue head once if it is due. Never lets a larger id overtake it (INV-3)."""
        head = self.head(conn)
        if head is None:
            conn.commit()
            return StepResult("idle")
        now = self.clock.now()
        if head.gap_seen is not None:
            until = head.gap_seen + timedelta(seconds=self.gap_grace_s)
            if until > now:
                conn.commit()
                return StepResult("wait_gap", head.msg_id, wait_until=until)
            self._pass_gaps(conn, head.msg_id, now)
        if head.next_attempt_at is not None and head.next_attempt_at > now:
            conn.commit()
            return StepResult("wait_backoff", head.msg_id, wait_until=head.next_attempt_at)
        return self.process(conn, head)

    @staticmethod
    def _pass_gaps(conn: Connection, head_id: int, now: datetime) -> None:
        """Expired gaps below the head are recorded as passed (US-01 AC5); a row that shows up
        later is still registered and processed, as a late arrival."""
        passed = conn.execute(update(intake_gap).where(
            intake_gap.c.msg_id < head_id, intake_gap.c.passed_at.is_(None),
            intake_gap.c.arrived_at.is_(None)).values(passed_at=now))
        log.warning("passed %s expired gap(s) below mailbox id %s", passed.rowcount, head_id)

    # --- one message -----------------------------------------------------------------------
    def process(self, conn: Connection, head) -> StepResult:
        msg_id = head.msg_id
        if head.applied_at is not None:       # crash or hook failure after transaction 1 (INV-20b)
            return self._after_apply(conn, head, [])
        assert self.source is not None
        try:
            body = self.source.body(conn, msg_id)
        except SourceUnavailable as exc:
            return self._source_wait(conn, head, exc)
        if body is None:
            return self._finish(conn, head, DEAD_STATUS, "missing", "mailbox row vanished before processing")
        try:
            msg = decode(body, max_bytes=self.max_body_bytes)
        except SisRefused as exc:
            rule = self._ignored_by(exc.meta) if exc.meta is not None else None
            if rule is not None:     # US-04: an ignored type is skipped whatever its body looks like
                return self._finish(conn, head, SKIPPED, f"ignored:{rule}", None)
            return self._finish(conn, head, DEAD_STATUS, exc.reason, exc.detail, error_class="MALFORMED")
        except Exception as exc:  # a decoder defect, not a verdict on the message: retried
            log.exception("decoder error on mailbox id %s", msg_id)
            return self._failure(conn, head, "CODEC_ERROR", exc)
        rule = self._ignored_by(msg.meta)
        if rule is not None:
            return self._finish(conn, head, SKIPPED, f"ignored:{rule}", None, msg=msg, bind=False)
        # Identity (INV-9) is checked optimistically on the apply path: binding it is part of the
        # guarded write, and the unique constraint on identity_key refuses a clash, which rolls the
        # whole transaction back before the clash is classified. One round trip less per message.
        try:
            outcome = self._transaction_1(conn, head, msg)
        except (SQLAlchemyError, LockLost) as exc:
            self._rollback(conn)
            if isinstance(exc, LockLost) or is_disconnect(exc):
                raise
            if _identity_taken(exc):
                other = self._bound_elsewhere(conn, msg, msg_id)
                if other is not None:
                    return self._identity_clash(conn, head, msg, other)
            return self._failure(conn, head, "INFRA", exc)
        except Exception as exc:  # a handler or engine defect: retried, then dead-lettered
            self._rollback(conn)
            log.exception("handler error on mailbox id %s", msg_id)
            return self._failure(conn, head, "HANDLER_ERROR", exc)
        if isinstance(outcome, StepResult):       # folded: transaction 2 committed with transaction 1
            return outcome
        if isinstance(outcome, Decision):
            other = self._bound_elsewhere(conn, msg, msg_id)
            if other is not None:
                return self._identity_clash(conn, head, msg, other)
            status = DEAD_STATUS if outcome.outcome == DEAD else SKIPPED
            return self._finish(conn, head, status, outcome.reason, outcome.detail, msg=msg,
                                bind=status == SKIPPED and outcome.reason == "unsupported",
                                error_class="MALFORMED" if status == DEAD_STATUS else None)
        faults.reach("between_tx1_tx2")
        return self._after_apply(conn, head, outcome)

    @staticmethod
    def _bound_elsewhere(conn: Connection, msg: SisMessage, msg_id: int):
        return conn.exec_driver_sql(_IDENTITY_SQL, {"identity": msg.meta.identity, "msg_id": msg_id}).first()

    def _identity_clash(self, conn: Connection, head, msg: SisMessage, other) -> StepResult:
        """Same SNDR|TYPE|STYP|SEQN already bound to another row (INV-9): same content is a
        duplicate, other content a conflict; neither has any business effect."""
        if other.payload_hash == msg.payload_hash:
            return self._finish(conn, head, SKIPPED, "duplicate", None, msg=msg, bind=False, dup_of=other.msg_id)
        log.error("ALERT identity conflict: %s of mailbox id %s already bound to id %s with other content",
                  msg.meta.identity, head.msg_id, other.msg_id)
        return self._finish(conn, head, SKIPPED, "identity_conflict",
                            f"{msg.meta.identity} bound to mailbox id {other.msg_id} with other content",
                            msg=msg, bind=False, dup_of=other.msg_id)

    def _ignored_by(self, meta: Meta) -> str | None:
        """US-04: case-insensitive TYPE-STYP / TYPE-* rules, checked before identity binding."""
        key = meta.type_styp.upper()
        for rule in self.ignore_rules:
            if fnmatch.fnmatchcase(key, rule.upper()):
                return rule
        return None

    @property
    def folds_transactions(self) -> bool:
        """With no post-commit step there is nothing to do between transactions 1 and 2, so
        transaction 2's writes join transaction 1 and commit with it (one commit, same outcome
        as the two committed back to back; docs/decisions.md P8). ``split_transactions`` forces
        the two-commit path (the crash matrix uses it to crash between the two)."""
        return not self.post_commit and not self.split_transactions

    def _transaction_1(self, conn: Connection, head, msg: SisMessage) -> list[FlightState] | Decision | StepResult:
        """State, outbox events (unreleased), effects and ``applied_at`` in one commit (INV-17b).

        Returns the touched states, or the handler's non-apply Decision (nothing written), or the
        terminal StepResult when transaction 2 was folded into this one.
        Raises ``LockLost`` when this session no longer holds the writer lock.
        """
        msg_id = head.msg_id
        if not head.writer_held:     # the writer row was locked by the head query, same transaction
            conn.rollback()
            raise LockLost("transaction 1 refused: this session does not hold the writer lock")
        repo = FlightRepository(conn)
        routed = routing.decide(conn, msg, msg_id)
        decision = routed.decision
        if decision.outcome != APPLY:
            conn.rollback()
            return decision
        before_states = dict(routed.flights)
        current = dict(routed.flights)
        next_states: list[FlightState] = []
        events: list[OutboxRow] = []
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
            events += outbox.change_events(msg_id, msg.meta, state, result.changed, result.cleared)
        now = self.clock.now()
        with pipelined(conn):        # the writes travel together: one round trip, not one each
            repo.persist_next_states(next_states, now=now, previous=before_states)
            if not decision.plans:
                outbox.insert(conn, events)
                events = []
        # plan writers read their own results (ledger CAS): not pipelined
        events += write_plans(conn, decision.plans, msg_id, now)
        outbox.insert(conn, events)
        if self.folds_transactions:
            faults.reach("before_tx1_commit")
            return self._finish(conn, head, SUCCEEDED, None, None, msg=msg, extra={"applied_at": now})
        done = conn.exec_driver_sql(_APPLIED_SQL, {
            "now": now, "identity": msg.meta.identity, "payload_hash": msg.payload_hash,
            "msg_type": msg.meta.type, "msg_styp": msg.meta.styp, "msg_id": msg_id,
            "pid": writer_pid(conn) or -1})
        if done.rowcount != 1:
            conn.rollback()
            raise LockLost(f"mailbox id {msg_id} is no longer open or already applied; transaction 1 rolled back")
        faults.reach("before_tx1_commit")
        conn.commit()
        return next_states

    def _after_apply(self, conn: Connection, head, states: Sequence[FlightState]) -> StepResult:
        """Post-commit hooks, then transaction 2 (INV-17b: terminal only after the hooks succeed)."""
        msg_id = head.msg_id
        try:
            if self.post_commit:
                if not states:
                    states = self._touched_states(conn, msg_id)
                conn.commit()
                for hook in self.post_commit:
                    hook(conn, msg_id, states)
        except Exception as exc:
            self._rollback(conn)
            if isinstance(exc, SQLAlchemyError) and is_disconnect(exc):
                raise
            log.warning("post-commit step failed for mailbox id %s: %s", msg_id, exc)
            return self._failure(conn, head, "INFRA", exc)
        return self._finish(conn, head, SUCCEEDED, None, None)

    @staticmethod
    def _touched_states(conn: Connection, msg_id: int) -> list[FlightState]:
        flids = [r[0] for r in conn.execute(select(msg_event.c.flid).where(msg_event.c.msg_id == msg_id).distinct())]
        return list(FlightRepository(conn).load(flids).values())

    # --- terminal and failure paths ----------------------------------------------------------
    def _finish(self, conn: Connection, head, status: str, reason: str | None, detail: str | None, *,
                msg: SisMessage | None = None, bind: bool = True, dup_of: int | None = None,
                error_class: str | None = None, attempts: int | None = None,
                extra: dict | None = None) -> StepResult:
        """Transaction 2: terminal status, history, backfill todo and event release, one statement."""
        now = self.clock.now()
        values: dict = {"status": status, "reason": reason, "error_detail": detail, "terminal_at": now,
                        "updated_at": now, "next_attempt_at": None, "dup_of": dup_of, **(extra or {})}
        if error_class is not None:
            values["error_class"] = error_class
        if attempts is not None:
            values["attempts"] = attempts
        if msg is not None:
            values.update(msg_type=msg.meta.type, msg_styp=msg.meta.styp, payload_hash=msg.payload_hash)
            if bind:
                values["identity_key"] = msg.meta.identity
        self._status_write(conn, head.msg_id, values, terminal=True,
                           hst={"status": status, "reason": reason, "error_class": error_class,
                                "error_detail": detail, "attempt": attempts})
        assert self.source is not None
        self.source.forget(head.msg_id)
        faults.reach("after_tx2")
        if status == DEAD_STATUS:
            log.error("ALERT dead letter: mailbox id %s %s (%s)", head.msg_id, reason, detail)
        return StepResult("processed", head.msg_id, status, reason)

    def _failure(self, conn: Connection, head, error_class: str, exc: BaseException) -> StepResult:
        """A failed attempt: backoff 1, 2, 4, 8, 16 s, or DEAD(exhausted) (US-03 AC4/AC5)."""
        now = self.clock.now()
        attempts = head.attempts + 1
        detail = f"{type(exc).__name__}: {exc}"[:2000]
        if self.policy.exhausted(attempts, head.created_at, now):
            return self._finish(conn, head, DEAD_STATUS, "exhausted", detail, error_class=error_class,
                                attempts=attempts)
        next_at = self.policy.next_attempt_at(attempts, now)
        self._status_write(conn, head.msg_id, {
            "status": FAILED, "attempts": attempts, "next_attempt_at": next_at, "error_class": error_class,
            "error_detail": detail, "updated_at": now}, terminal=False,
            hst={"status": FAILED, "reason": None, "error_class": error_class, "error_detail": detail,
                 "attempt": attempts})
        return StepResult("processed", head.msg_id, FAILED, error_class, wait_until=next_at)

    def _source_wait(self, conn: Connection, head, exc: SourceUnavailable) -> StepResult:
        """The mailbox is down and the head's body is not cached: wait, note it, use no attempt."""
        now = self.clock.now()
        log.warning("mailbox id %s waits for the mailbox: %s", head.msg_id, exc)
        conn.execute(update(proc_state).where(proc_state.c.msg_id == head.msg_id).values(
            error_class="SOURCE_UNAVAILABLE", error_detail=str(exc)[:2000], updated_at=now))
        conn.commit()
        return StepResult("wait_source", head.msg_id, wait_until=now + timedelta(seconds=SOURCE_RETRY_S))

    def _status_write(self, conn: Connection, msg_id: int, values: dict, *, terminal: bool, hst: dict) -> None:
        """One guarded statement: the row must still be open and the writer lock held (OPS-1)."""
        columns = tuple(sorted(values))
        params = {f"v_{c}": values[c] for c in columns}
        params.update({f"h_{k}": v for k, v in hst.items()})
        params.update(msg_id=msg_id, now=values["updated_at"], pid=writer_pid(conn) or -1)
        try:
            written = conn.exec_driver_sql(_status_sql(columns, terminal), params).scalar_one()
            if written != 1:
                conn.rollback()
                raise LockLost(f"status write for mailbox id {msg_id} refused: the row is not open or "
                               "this session lost the writer lock")
            conn.commit()
        except SQLAlchemyError:
            self._rollback(conn)
            raise

    @staticmethod
    def _rollback(conn: Connection) -> None:
        try:
            conn.rollback()
        except DBAPIError:
            pass

