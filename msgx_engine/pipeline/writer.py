"""The single active writer (OPS-1, SPEC PRE-5): a PostgreSQL session advisory lock.

The pump takes the lock on the connection it writes with. SQLAlchemy silently opens a new DBAPI
connection after a disconnect, and that new session does not hold the lock; so every guarded
write re-checks, inside its own statement, that *this* session still holds it (``lock_held``).
A write without the lock changes nothing and raises ``LockLost``.
"""

from __future__ import annotations

from sqlalchemy import Connection, exists, literal_column, select, table, text

PUMP_LOCK_KEY = 0x6D736778_0001  # "msgx" + 1
_CLASSID, _OBJID = PUMP_LOCK_KEY >> 32, PUMP_LOCK_KEY & 0xFFFFFFFF


class LockLost(RuntimeError):
    """This session no longer holds the writer lock: the guarded write was refused."""


_pg_locks = table("pg_locks")


def lock_held():
    """SQL boolean: the current session holds the pump's advisory lock (bigint key: objsubid 1)."""
    return exists(select(literal_column("1")).select_from(_pg_locks).where(
        literal_column("locktype") == "advisory",
        literal_column("pid") == literal_column("pg_backend_pid()"),
        literal_column("classid") == literal_column(f"{_CLASSID}::oid"),
        literal_column("objid") == literal_column(f"{_OBJID}::oid"),
        literal_column("objsubid") == 1,
        literal_column("granted")))


def try_lock(conn: Connection) -> bool:
    got = bool(conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": PUMP_LOCK_KEY}).scalar_one())
    conn.commit()
    return got


def holds_lock(conn: Connection) -> bool:
    held = bool(conn.execute(select(lock_held())).scalar_one())
    conn.commit()
    return held
