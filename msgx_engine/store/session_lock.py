"""A PostgreSQL session advisory lock held for a worker's whole life on the connection it works with.

Single-active workers (the pump, the dispatcher) do every guarded write on the connection that
holds their lock, so losing the connection loses the lock and the writes together. The lock is
released explicitly before the connection returns to the pool: a pooled session would otherwise
keep holding it after the worker ended.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

log = logging.getLogger(__name__)


class LockBusy(RuntimeError):
    """Another worker holds the lock."""


def _pid_key(key: int) -> tuple[str, int]:
    return ("advisory_lock_pid", key)


def try_lock_session(conn: Connection, key: int) -> bool:
    """Take advisory lock ``key`` for this session; on success remember the backend pid that holds
    it (``locked_pid``), so guarded writes can check they still run in that very backend."""
    got, pid = conn.execute(text("SELECT pg_try_advisory_lock(:k), pg_backend_pid()"), {"k": key}).one()
    conn.commit()
    if got:
        conn.info[_pid_key(key)] = int(pid)
    return bool(got)


def locked_pid(conn: Connection, key: int) -> int | None:
    """The backend pid that took lock ``key`` on this connection, if it did."""
    return conn.info.get(_pid_key(key))


def unlock_session(conn: Connection, key: int) -> None:
    """Give lock ``key`` back before the connection returns to the pool (a pooled session would keep it)."""
    if conn.info.pop(_pid_key(key), None) is not None:
        conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
        conn.commit()


class SessionLock:
    def __init__(self, engine: Engine, key: int, holder: str, busy: type[Exception] = LockBusy,
                 refusal: str | None = None) -> None:
        self.engine = engine
        self.key = key
        self.holder = holder
        self.busy = busy
        self.refusal = refusal       # the ``busy`` message; a generic one when None
        self.conn: Connection | None = None

    def acquire(self) -> Connection:
        """The locked connection, or ``busy`` raised at once when another session holds the lock."""
        conn = self.engine.connect()
        if not try_lock_session(conn, self.key):
            conn.close()
            raise self.busy(self.refusal or f"another {self.holder} holds pg advisory lock {self.key}; this one exits")
        self.conn = conn
        return conn

    @contextmanager
    def held(self) -> Iterator[Connection]:
        """The locked connection for one piece of work, released after it whatever happens: the shape
        of the operator commands that must run while no pump does (recover, adopt, shadow start-from)."""
        conn = self.acquire()
        try:
            yield conn
        finally:
            self.release()

    def reacquire(self, within_s: float) -> Connection:
        """After a lost connection: drop it, reconnect and take the lock again, retrying for ``within_s``."""
        self._drop()
        conn = self.acquire_within(within_s)
        log.warning("%s reconnected to PostgreSQL and re-acquired its lock", self.holder)
        return conn

    def acquire_within(self, within_s: float) -> Connection:
        """``acquire``, retried for ``within_s`` while PostgreSQL cannot be reached (a restart or
        failover under way); ``busy`` is raised at once as always. A worker started in the moment
        the server went away waits for it like a running one, rather than dying with a traceback."""
        deadline = time.monotonic() + within_s
        delay = 0.5
        while True:
            try:
                return self.acquire()
            except DBAPIError as exc:
                if time.monotonic() > deadline:
                    raise
                log.warning("PostgreSQL unavailable for the %s (%s); retrying in %.1fs", self.holder,
                            exc.__class__.__name__, delay)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def release(self) -> None:
        conn, self.conn = self.conn, None
        if conn is None:
            return
        try:
            conn.rollback()
            unlock_session(conn, self.key)
            conn.close()
        except Exception:  # noqa: BLE001 - a broken connection: drop it, the server frees the lock
            self.conn = conn
            self._drop()

    def _drop(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                conn.invalidate()
                conn.close()
            except Exception:  # noqa: BLE001 - already broken
                pass
