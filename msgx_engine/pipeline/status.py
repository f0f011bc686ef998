"""Recording a message's status: the guarded statements of ``store.queue`` (INV-8, OPS-1).

Every status the queue head gets is one statement that changes the row only while it is still
open and only from the backend that holds the writer lock; a refusal raises ``LockLost``. The
recorder writes and nothing else: it neither commits nor rolls back, because whether a status
commits now, with the next messages of a group, or not at all is the unit of work's decision
(``unit_of_work.py``). Failed statements propagate to it unchanged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection

from msgx_engine.clock import Clock
from msgx_engine.pipeline.outcomes import ErrorClass, Failed, StepKind, StepResult, Terminal, Wait
from msgx_engine.pipeline.policy import RetryPolicy
from msgx_engine.pipeline.source import SourceUnavailable
from msgx_engine.pipeline.writer import LockLost, writer_pid
from msgx_engine.redact import safe_text
from msgx_engine.sis.decode import SisMessage
from msgx_engine.store import identity, queue
from msgx_engine.store.queue import HistoryRow, QueueHead, Status

log = logging.getLogger(__name__)

SOURCE_RETRY_S = 2.0


def pid(conn: Connection) -> int:
    """The backend pid that took the writer lock on this connection (-1: none, every guard fails)."""
    return writer_pid(conn) or -1


@dataclass(frozen=True)
class StatusRecorder:
    clock: Clock
    policy: RetryPolicy
    identity_window: timedelta = identity.DEFAULT_WINDOW      # D26, identity window: how long an identity binds

    def bind(self, msg: SisMessage) -> queue.Bind:
        return queue.Bind(msg.meta.identity, msg.payload_hash, self.identity_window)

    # --- transaction 1 ----------------------------------------------------------------------
    def applied(self, conn: Connection, head: QueueHead, msg: SisMessage, now: datetime) -> None:
        """``applied_at`` and the identity binding, guarded (INV-20b: a message is applied once)."""
        if not queue.mark_applied(conn, head.msg_id, now=now, bind=self.bind(msg), msg_type=msg.meta.type,
                                  msg_styp=msg.meta.styp, pid=pid(conn)):
            raise LockLost(f"mailbox id {head.msg_id} is no longer open or already applied; "
                           "transaction 1 rolled back")

    # --- transaction 2 ----------------------------------------------------------------------
    def terminal(self, conn: Connection, head: QueueHead, t: Terminal) -> None:
        """Terminal status, history, backfill todo and event release in one statement, with the
        identity binding when the message binds it."""
        now = self.clock.now()
        values: dict[str, object] = {
            "status": t.status, "reason": t.reason, "error_detail": t.detail, "terminal_at": now,
            "updated_at": now, "next_attempt_at": None, "dup_of": t.dup_of}
        if t.applied_at is not None:
            values["applied_at"] = t.applied_at
        if t.error_class is not None:
            values["error_class"] = t.error_class
        if t.attempts is not None:
            values["attempts"] = t.attempts
        bind = None
        if t.kind is not None:
            values.update(msg_type=t.kind[0], msg_styp=t.kind[1])
        if t.msg is not None:
            values.update(msg_type=t.msg.meta.type, msg_styp=t.msg.meta.styp, payload_hash=t.msg.payload_hash)
            if t.bind:
                values["identity_key"] = t.msg.meta.identity
                bind = self.bind(t.msg)
        self._write(conn, head, values, terminal=True, now=now, bind=bind,
                    history=HistoryRow(t.status, t.reason, t.error_class, t.detail, t.attempts))
        if t.status == Status.DEAD:
            log.error("ALERT dead letter: mailbox id %s %s (%s)", head.msg_id, t.reason, safe_text(t.detail or ""))

    def finished(self, conn: Connection, msg_ids: list[int]) -> None:
        """Transaction 2 of a group's applied messages, one guarded statement (P16, two-transaction write-behind)."""
        if not queue.finish_applied(conn, msg_ids, now=self.clock.now(), pid=pid(conn)):
            raise LockLost(f"the terminal statuses of mailbox ids {msg_ids[0]}..{msg_ids[-1]} were refused: a row "
                           "is not open or this session lost the writer lock")

    # --- open statuses: the head stays at the head --------------------------------------------
    def exhausted(self, head: QueueHead, failed: Failed) -> Terminal | None:
        """DEAD(exhausted) when this failure used the last attempt or passed the head deadline
        (US-03 AC4/AC5)."""
        attempts = head.attempts + 1
        if not self.policy.exhausted(attempts, head.deadline_from, self.clock.now()):
            return None
        kind = (failed.msg.meta.type, failed.msg.meta.styp) if failed.msg is not None else None
        return Terminal(Status.DEAD, "exhausted", _detail(failed.exc), failed.error_class, attempts=attempts,
                        kind=kind)

    def failed(self, conn: Connection, head: QueueHead, failed: Failed) -> StepResult:
        """A failed attempt that leaves attempts: FAILED with backoff 1, 2, 4, 8, 16 s."""
        now = self.clock.now()
        attempts = head.attempts + 1
        detail = _detail(failed.exc)
        next_at = self.policy.next_attempt_at(attempts, now)
        self._write(conn, head, {
            "status": Status.FAILED, "attempts": attempts, "next_attempt_at": next_at,
            "error_class": failed.error_class, "error_detail": detail, "updated_at": now, **_kind(failed)},
            terminal=False,
            now=now, history=HistoryRow(Status.FAILED, None, failed.error_class, detail, attempts))
        return StepResult(StepKind.PROCESSED, head.msg_id, Status.FAILED, failed.error_class, wait_until=next_at)

    def wait(self, conn: Connection, head: QueueHead, wait: Wait) -> StepResult:
        """A wait (D22, projection failure; D24, vanished mailbox row): FAILED (open) with its class, the same
        attempts, the next look due."""
        now = self.clock.now()
        next_at = now + timedelta(seconds=wait.delay_s)
        self._write(conn, head, {
            "status": Status.FAILED, "next_attempt_at": next_at, "error_class": wait.error_class,
            "error_detail": wait.detail, "updated_at": now}, terminal=False, now=now,
            history=HistoryRow(Status.FAILED, None, wait.error_class, wait.detail, head.attempts))
        if wait.alert:
            log.error("ALERT %s", wait.alert)
        kind = StepKind.WAIT_OPERATOR if wait.error_class == ErrorClass.SOURCE_MISSING else StepKind.WAIT_BACKOFF
        return StepResult(kind, head.msg_id, Status.FAILED, wait.error_class, wait_until=next_at)

    def source_wait(self, conn: Connection, head: QueueHead, exc: SourceUnavailable) -> StepResult:
        """The mailbox is down and the head's body is not cached: note it; no status, no attempt."""
        now = self.clock.now()
        log.warning("mailbox id %s waits for the mailbox: %s", head.msg_id, safe_text(exc))
        queue.note_error(conn, head.msg_id, ErrorClass.SOURCE_UNAVAILABLE, str(exc), now)
        return StepResult(StepKind.WAIT_SOURCE, head.msg_id, wait_until=now + timedelta(seconds=SOURCE_RETRY_S))

    def _write(self, conn: Connection, head: QueueHead, values: dict[str, object], *, terminal: bool,
               now: datetime, history: HistoryRow, bind: queue.Bind | None = None) -> None:
        """The one guarded statement: the row must still be open and this run must hold the
        writer lock (OPS-1), else ``LockLost``; an identity bound elsewhere inside the window
        raises ``IdentityTaken``."""
        if not queue.write_status(conn, head.msg_id, values, terminal=terminal, history=history, now=now,
                                  pid=pid(conn), bind=bind):
            raise LockLost(f"status write for mailbox id {head.msg_id} refused: the row is not open or "
                           "this session lost the writer lock")


def _kind(failed: Failed) -> dict[str, object]:
    """TYPE/STYP of a failed message that decoded, so its dead letter names them (not ``?/?``)."""
    return {} if failed.msg is None else {"msg_type": failed.msg.meta.type, "msg_styp": failed.msg.meta.styp}


def _detail(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:2000]
