"""The single active writer (OPS-1, SPEC PRE-5): a PostgreSQL session advisory lock.

The pump takes the lock on the connection it writes with. SQLAlchemy silently opens a new DBAPI
connection after a disconnect, and that new session does not hold the lock; so every guarded
write re-checks, inside its own statement, that it runs in the very backend that took the lock
(``lock_held``: ``pg_backend_pid()`` equals the pid recorded when the lock was granted). A
session-level advisory lock is released only when its session ends, so "same backend" means
"lock still held" — and the check costs nothing, unlike a scan of ``pg_locks``. A write from any
other backend changes nothing and raises ``LockLost``.
"""

from __future__ import annotations

from sqlalchemy import Connection, false, literal, literal_column, select, text

PUMP_LOCK_KEY = 0x6D736778_0001  # "msgx" + 1
_PID_KEY = "msgx_writer_pid"


class LockLost(RuntimeError):
    """This session no longer holds the writer lock: the guarded write was refused."""


def writer_pid(conn: Connection) -> int | None:
    """The backend pid that took the writer lock on this connection, if any."""
    return conn.info.get(_PID_KEY)


def lock_held(conn: Connection):
    """SQL boolean: this statement runs in the backend that holds the pump's advisory lock."""
    pid = writer_pid(conn)
    if pid is None:
        return false()
    return literal_column("pg_backend_pid()") == literal(pid)


def try_lock(conn: Connection) -> bool:
    got, pid = conn.execute(text("SELECT pg_try_advisory_lock(:k), pg_backend_pid()"),
                            {"k": PUMP_LOCK_KEY}).one()
    conn.commit()
    if got:
        conn.info[_PID_KEY] = int(pid)
    return bool(got)


def release_lock(conn: Connection) -> None:
    """Give the lock back before the connection returns to the pool (a pooled session would keep it)."""
    if conn.info.pop(_PID_KEY, None) is not None:
        conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": PUMP_LOCK_KEY})
        conn.commit()


def holds_lock(conn: Connection) -> bool:
    held = bool(conn.execute(select(lock_held(conn))).scalar_one())
    conn.commit()
    return held
