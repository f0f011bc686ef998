"""The transaction scope of the pump's other writers: intake, inline backfill, the drained check.

They share the pump's writer connection with the queue head's unit of work, and each of them
commits (or rolls back) on its own. A commit or rollback issued while the unit of work holds an
open group would end the group's transaction with it: half a group committed before its marks
and statuses belong together, or a whole group silently undone by an intake that found the
mailbox unreachable. ``writer_scope`` makes the hand-over explicit instead of a convention of
the pump's loop:

1. the unit of work's open group is committed first (``flush``: for a unit of work with nothing
   open that is a check of a list and no statement, so the hot loop pays no round trip);
2. the block gets the connection;
3. a clean exit commits what the block left open (nothing, when its last statement was a commit:
   SQLAlchemy then sends nothing), an exception rolls it back and goes on up unchanged.

The commits inside the block that end a read before the mailbox is asked, or record something
that must hold even if the rest of the pass fails, stay where they are (see ``Intake.scan`` and
``Backfill.run_once``); the scope only guarantees that none of them can reach the group's writes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from sqlalchemy import Connection

from msgx_engine.pipeline.unit_of_work import quiet_rollback


class Flushes(Protocol):
    """What the scope needs of a unit of work: commit whatever it holds open."""

    def flush(self, conn: Connection) -> None: ...


@contextmanager
def writer_scope(conn: Connection, uow: Flushes) -> Iterator[Connection]:
    """``with writer_scope(conn, uow) as c:`` the block runs with the unit of work's group
    committed, and its own transaction is committed on a clean exit or rolled back on an
    exception (module docstring). A failing flush is the unit of work's to handle: it goes on up
    before the block runs."""
    uow.flush(conn)
    try:
        yield conn
    except BaseException:
        quiet_rollback(conn)     # a broken session's own rollback error is dropped: the block's goes on up
        raise
    conn.commit()

