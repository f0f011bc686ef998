"""``writer_scope``: the pump's other writers (intake, backfill, the drained check) run with the
unit of work's group committed first, and their own transaction committed on a clean exit or
rolled back on an error (pipeline/writer_scope.py)."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import OperationalError

from msgx_engine.pipeline.writer_scope import writer_scope


class FakeConn:
    """Records what the scope and the unit of work do to the connection, in order."""

    def __init__(self, *, rollback_fails: bool = False) -> None:
        self.calls: list[str] = []
        self.rollback_fails = rollback_fails

    def commit(self) -> None:
        self.calls.append("commit")

    def rollback(self) -> None:
        self.calls.append("rollback")
        if self.rollback_fails:
            raise OperationalError("ROLLBACK", {}, Exception("server closed the connection"))


class FakeUow:
    """A unit of work holding an open group until it is flushed."""

    def __init__(self) -> None:
        self.open_group = True
        self.flushes = 0

    def flush(self, conn) -> None:
        self.flushes += 1
        if self.open_group:
            conn.calls.append("group commit")
            self.open_group = False


def test_the_open_group_commits_before_the_block_and_the_block_commits_at_its_end():
    conn, uow = FakeConn(), FakeUow()
    with writer_scope(conn, uow) as c:
        assert c is conn
        assert not uow.open_group                      # the group was flushed before the block ran
        conn.calls.append("intake")
    assert conn.calls == ["group commit", "intake", "commit"]


def test_a_flushed_group_is_flushed_again_for_nothing():
    """The pump flushes before the backfill and the drained check already: the scope's flush
    finds nothing open and the connection sees only the block's work and the commit."""
    conn, uow = FakeConn(), FakeUow()
    uow.open_group = False
    with writer_scope(conn, uow):
        conn.calls.append("backfill")
    assert uow.flushes == 1 and conn.calls == ["backfill", "commit"]


def test_an_error_in_the_block_rolls_back_and_goes_on_up_uncommitted():
    conn, uow = FakeConn(), FakeUow()
    with pytest.raises(RuntimeError, match="state behind mailbox"):
        with writer_scope(conn, uow):
            conn.calls.append("intake")
            raise RuntimeError("state behind mailbox")
    assert conn.calls == ["group commit", "intake", "rollback"]


def test_a_broken_session_raises_the_blocks_error_not_the_rollbacks():
    """A lost connection fails the block and its rollback: the pump must see the block's error
    (it reconnects on a disconnect) and nothing is committed."""
    conn, uow = FakeConn(rollback_fails=True), FakeUow()
    lost = OperationalError("SELECT 1", {}, Exception("terminating connection"))
    with pytest.raises(OperationalError) as raised:
        with writer_scope(conn, uow):
            raise lost
    assert raised.value is lost
    assert conn.calls == ["group commit", "rollback"]


def test_a_failing_flush_runs_nothing_and_is_the_unit_of_works_to_handle():
    class Refused(FakeUow):
        def flush(self, conn) -> None:
            raise RuntimeError("group refused")

    conn = FakeConn()
    with pytest.raises(RuntimeError, match="group refused"):
        with writer_scope(conn, Refused()):
            conn.calls.append("intake")
    assert conn.calls == []
