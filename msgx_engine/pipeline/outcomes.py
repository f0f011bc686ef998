"""What one step of the queue head comes to, as plain values.

The message path (``protocol.py``) writes no status while it works: each of its steps returns an
``Outcome``, recording (``status.py``) turns the outcome into the one guarded status statement,
and the message's transaction (``unit_of_work.py``, ``grouped.py``) decides when that statement commits.
The pump only reads the ``StepResult`` at the end. Keeping these values in a module of their own
lets each of those modules be read without the others.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from sqlalchemy import Connection

from msgx_engine.pipeline.source import SourceUnavailable
from msgx_engine.sis.decode import SisMessage
from msgx_engine.state.model import FlightState
from msgx_engine.store.queue import Status

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
    WAIT_OPERATOR = "wait_operator"  # the head's mailbox row vanished: an operator resolves it (D24, vanished mailbox
                                     # row)
    REGROUP = "regroup"              # an open group was rolled back: its messages are redone alone (P10, group commit)

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
    PROJECTION = "PROJECTION"        # the post-commit projection failed: the head waits, no attempt (D22, projection
                                     # failure)
    SOURCE_MISSING = "SOURCE_MISSING"  # the mailbox row vanished: the head waits for an operator (D24)


class Step(StrEnum):
    """The message path; the step a failure happened in decides its class (``Processor._classify``)."""

    READ_AND_DECODE = "read_and_decode"
    DECIDE = "decide"
    WRITE_STATE = "write_state"
    COMMIT_APPLIED = "commit_applied"
    POST_COMMIT = "post_commit"


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
    attempts: int | None = None       # DEAD(exhausted) records the attempt that used the last one
    kind: tuple[str, str] | None = None   # TYPE/STYP of a message that failed after decoding (no ``msg``)


@dataclass(frozen=True)
class Failed:
    """A failed attempt: backoff, or DEAD(exhausted) (US-03 AC4/AC5)."""

    error_class: ErrorClass
    exc: BaseException
    msg: SisMessage | None = None        # decoded: its TYPE/STYP are recorded, so a dead letter shows them


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
class Written:
    """Transaction 1's writes are made (``msg`` applied at ``applied_at``; ``states``: what its
    post-commit step sees); what is left is the end of transaction 1, the post-commit step and the
    terminal status (``MessageTransaction.finish``). ``msg`` None: applied by an earlier attempt
    (INV-20b), only the post-commit step and the terminal status are left."""

    msg: SisMessage | None
    applied_at: datetime | None = None
    states: Sequence[FlightState] = ()


@dataclass(frozen=True)
class Applied:
    """Transaction 1's writes and ``applied_at`` are in the open group's transaction (P12, grouped two-transaction
    messages): the post-commit step and the terminal status follow once the group commits."""

    states: Sequence[FlightState]


@dataclass(frozen=True)
class Regroup:
    """The open group had to be rolled back (P10): the messages before the head went with it, so
    nothing is recorded for the head; the messages up to ``msg_id`` are redone one commit each.
    An ordinary value, returned by the unit of work where a rollback costs the group."""

    msg_id: int
    lost: int

    @property
    def result(self) -> StepResult:
        return StepResult(StepKind.REGROUP, self.msg_id, reason=(
            f"group of {self.lost} message(s) rolled back at mailbox id {self.msg_id}; redone one by one"))


Outcome = Terminal | Failed | SourceWait | Wait | Written | Applied | Regroup


class DecoderCrash(Exception):
    """The decoder itself failed (not a verdict on the message)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error
