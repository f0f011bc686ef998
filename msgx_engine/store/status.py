"""The status words of the queue tables (``proc_state.status``, ``backfill_todo.status``).

Defined once, below ``store.tables`` (whose partial indexes name them) and the modules that hold
every statement over these tables (``store.queue``, which re-exports them, ``store.registration``,
``store.backfill_todos``, ``store.queue_figures`` and ``store.queue_selection``); SQL IN-lists are
built from them.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class Status(StrEnum):
    """``proc_state.status`` (DESIGN §4)."""

    PENDING = "PENDING"
    FAILED = "FAILED"
    SUCCEEDED = "SUCCEEDED"
    SKIPPED = "SKIPPED"
    DEAD = "DEAD"


OPEN: tuple[Status, ...] = (Status.PENDING, Status.FAILED)       # may run; the smallest is the head
TERMINAL: tuple[Status, ...] = (Status.SUCCEEDED, Status.SKIPPED, Status.DEAD)
# DEAD reasons a replay can fix once the cause is gone (retries ran out, the mailbox row was missing);
# every other DEAD reason (malformed, oversize, ...) fails the same way again
REPLAYABLE_DEAD: tuple[str, ...] = ("exhausted", "missing")


class TodoStatus(StrEnum):
    """``backfill_todo.status``: the mailbox mark still to write, or how it ended."""

    PENDING = "PENDING"
    DONE = "DONE"            # marked by us
    ALREADY = "ALREADY"      # someone else had marked it (C-15: never overwritten)
    FAILED = "FAILED"        # the mailbox row is gone
    SHADOW = "SHADOW"        # shadow mode (D29): the mark production writes; this instance never does


def sql_in(values: Iterable[StrEnum]) -> str:
    """``('A', 'B')`` for a prebuilt SQL string (enum values are fixed words, never input)."""
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"
