"""A warm standby's takeover on the real servers (OPS-1): handing the Dagster daemon to a host
(msgx_engine.store.monitoring.claim) is a compare-and-set on msgx's heartbeat row, so of two standbys
taking over from one sighting exactly one wins (one daemon per instance); the dead host's sessions
that still hold the writer lock are ended, and a mailbox lock holder that is not recognisably the
dead pump is left alone."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from msgx_dagster.standby import CLAIM
from msgx_engine.db import make_engine
from msgx_engine.mailbox.lock import MailboxBusy, MailboxLock
from msgx_engine.store import locks, monitoring
from tests.private_servers import wait_for


def claimed(conn) -> monitoring.Heartbeat | None:
    return next((b for b in monitoring.heartbeats(conn) if b.component == CLAIM), None)


def test_two_standbys_claiming_from_one_sighting_one_wins(pg_url):
    engine = make_engine(pg_url)
    try:
        with engine.begin() as conn:
            assert claimed(conn) is None
            assert monitoring.claim(conn, CLAIM, host="a", pid=1, seen=None)
            assert not monitoring.claim(conn, CLAIM, host="x", pid=9, seen=None)     # the row exists now
            seen = claimed(conn)
            assert seen is not None and seen.host == "a"
        with engine.begin() as conn:
            assert monitoring.claim(conn, CLAIM, host="b", pid=2, seen=seen)
        with engine.begin() as conn:
            assert not monitoring.claim(conn, CLAIM, host="c", pid=3, seen=seen)      # b took it first
            now = claimed(conn)
            assert now is not None and (now.host, now.pid) == ("b", 2)
            assert [b.component for b in monitoring.heartbeats(conn)] == [CLAIM]     # the pump's row untouched
    finally:
        engine.dispose()


def test_a_dead_hosts_writer_lock_session_is_ended_and_the_lock_is_free(pg_url):
    """A takeover from a dead host: PostgreSQL still holds the writer lock for that host's session
    (its TCP connection has not timed out); ending the holder frees the lock for the standby's pump."""
    holder, other = make_engine(pg_url, single=True), make_engine(pg_url, single=True)
    dead = holder.connect()
    try:
        dead_pid = dead.execute(text("SELECT pg_backend_pid()")).scalar()
        dead.execute(text("SELECT pg_advisory_lock(:k)"), {"k": locks.PUMP})
        with other.connect() as conn:
            assert monitoring.advisory_lock_held(conn, locks.PUMP)
            assert monitoring.end_lock_holder(conn, locks.PUMP) == dead_pid
            wait_for(lambda: not monitoring.advisory_lock_held(conn, locks.PUMP), "the writer lock is free", 10)
            assert monitoring.end_lock_holder(conn, locks.PUMP) is None
    finally:
        dead.invalidate()           # its session was ended under it: nothing to roll back
        holder.dispose()
        other.dispose()


def test_a_mailbox_lock_holder_that_is_not_the_dead_pump_is_left_alone(mailbox_url):
    """The mailbox lock may be another installation's: a holder the server does not name as the dead
    pump (another label, or MySQL without performance_schema, which cannot say) keeps its lock and is
    reported to the operator."""
    live = MailboxLock(mailbox_url)
    standby = MailboxLock(mailbox_url)
    try:
        live.acquire()
        found = standby.end_holder("msgx pump deadhost pid 4242")
        assert found is not None and found[1] is False and "connection" in found[0]
        assert live.held
        with pytest.raises(MailboxBusy):
            standby.acquire()
    finally:
        standby.dispose()
        live.dispose()
