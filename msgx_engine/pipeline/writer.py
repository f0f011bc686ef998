"""The single active writer (OPS-1, SPEC PRE-5): a PostgreSQL session advisory lock.

The pump takes the lock on the connection it writes with. SQLAlchemy silently opens a new DBAPI
connection after a disconnect, and that new session does not hold the lock; so every guarded
write re-checks, inside its own statement, that it runs in the very backend that took the lock
(``lock_held``: ``pg_backend_pid()`` equals the pid recorded when the lock was granted). A
session-level advisory lock is released only when its session ends, so "same backend" means
"lock still held" — and the check costs nothing, unlike a scan of ``pg_locks``. A write from any
other backend changes nothing and raises ``LockLost``.

The pid is kept in the connection's ``info``, which belongs to the DBAPI connection: SQLAlchemy
empties it when it opens a new session for the same ``Connection`` (after a restart or failover of
the server), so a reopened session knows no pid and every guarded write on it is refused until the
pump has taken the lock again (``SessionLock.reacquire``). tests/e2e/test_write_right.py holds
SQLAlchemy to that, and shows under restarts that no row is written by a session without the lock.
"""

from __future__ import annotations

from sqlalchemy import Connection, false, literal, literal_column, select

from msgx_engine.store.locks import PUMP
from msgx_engine.store.session_lock import locked_pid, try_lock_session, unlock_session


class LockLost(RuntimeError):
    """This session no longer holds the writer lock: the guarded write was refused."""


def writer_pid(conn: Connection) -> int | None:
    """The backend pid that took the writer lock on this connection, if any."""
    return locked_pid(conn, PUMP)


def lock_held(conn: Connection):
    """SQL boolean: this statement runs in the backend that holds the pump's advisory lock."""
    pid = writer_pid(conn)
    if pid is None:
        return false()
    return literal_column("pg_backend_pid()") == literal(pid)


def try_lock(conn: Connection) -> bool:
    return try_lock_session(conn, PUMP)


def release_lock(conn: Connection) -> None:
    unlock_session(conn, PUMP)


def holds_lock(conn: Connection) -> bool:
    held = bool(conn.execute(select(lock_held(conn))).scalar_one())
    conn.commit()
    return held
