"""Group commit (docs/decisions.md P10): consecutive messages share one commit.

A folded message (no post-commit step, decision P8, folded transactions) ends with its guarded terminal status write;
instead of committing there, the pump's unit of work (``grouped.py``) leaves the transaction open and goes on with the
next head, and commits the group once it holds ``max_messages`` or has been open ``max_s``, when
the head idles or waits, and before the pump marks the mailbox (``flush``). Every message in a
group is complete and terminal, so committing at any of these points leaves a state some
one-commit-per-message run could have left; a crash before the commit loses the whole group, which
is then processed again (nothing of it was marked or released: exactly once, INV-20b).

When a message of a group does anything but finish (a handler's SKIPPED or DEAD decision, a
failure, a lost lock) its step would roll the transaction back, and with it the messages before it
in the group. So the group is abandoned instead (``abort``, a ``Regroup``): rolled back whole, and the
messages from its first one up to that message are processed again one commit each, exactly as
without groups; grouping resumes after it. Strict mailbox-id order holds throughout (INV-3): a
redo starts again from the head. No savepoint is needed, so the happy path costs no extra round
trip; a failure costs at most ``max_messages`` redone messages.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from msgx_engine.pipeline.outcomes import Regroup

Result = TypeVar("Result")


@dataclass
class GroupCommit(Generic[Result]):
    """The group in progress: its uncommitted messages' results and when it began; the results
    committed since the pump last counted them; the id up to which messages commit alone."""

    max_messages: int = 64
    max_s: float = 0.05
    pending: list[tuple[int, Result]] = field(default_factory=list)
    committed: list[Result] = field(default_factory=list)
    solo_through: int = 0
    started: float = 0.0

    def joins(self, msg_id: int) -> bool:
        """This message's terminal status may stay uncommitted (it is past the last redo)."""
        return msg_id > self.solo_through

    def add(self, msg_id: int, result: Result) -> bool:
        """Hold a finished message's result until the commit; True when the group is due."""
        if not self.pending:
            self.started = time.monotonic()
        self.pending.append((msg_id, result))
        return len(self.pending) >= self.max_messages or time.monotonic() - self.started >= self.max_s

    def abort(self, msg_id: int) -> Regroup:
        """The open group was rolled back at ``msg_id``: redo up to it alone."""
        lost = len(self.pending)
        self.pending.clear()
        self.solo_through = msg_id
        return Regroup(msg_id, lost)

    def discard(self) -> None:
        """The session was lost with the group in it: nothing of it was committed."""
        self.pending.clear()

    def take(self) -> list[Result]:
        """The results committed since the last call (the pump counts them)."""
        done, self.committed = self.committed, []
        return done
