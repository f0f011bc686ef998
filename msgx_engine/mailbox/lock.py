"""One installation per mailbox: a named lock on the mailbox server, held for the pump's life.

Each installation's own PostgreSQL advisory lock only keeps two pumps of *that* installation
apart. Two installations (each with its own PostgreSQL) pointed at one mailbox would both
process every row, so the pump also takes a lock on the mailbox server itself, on a dedicated
connection it keeps open: MySQL/MariaDB ``GET_LOCK`` (no schema change, C-14), or a session
advisory lock when the mailbox is PostgreSQL (the embedded demo). Both are released by the server
when the connection ends, so a killed pump never leaves the lock behind.

MySQL lock names are server-wide, so the name carries the mailbox database: two mailboxes on one
server do not exclude each other. A refused pump names the holder: for MySQL the holding
connection's client address from the process list (and, where ``performance_schema`` is on, the
program name the holder announced: host and pid); for PostgreSQL the holder's
``application_name`` (host and pid) and client address from ``pg_stat_activity``.

A Galera cluster node (MariaDB with ``wsrep_on=ON``) cannot hold that lock: some MariaDB releases
refuse ``GET_LOCK`` there, others (10.11) grant it on that one node only, so two installations on
two nodes would both get it. The lock checks for it before taking the lock and refuses with a configuration
error naming what to do, at start and on every re-take (a failover onto a Galera node): never
the quiet "mailbox unreachable" retry that would let the pump go on without the lock.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import zlib
from collections.abc import Callable

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import SQLAlchemyError

from msgx_engine.config import ConfigError
from msgx_engine.db import make_engine, server_address
from msgx_engine.redact import first_line

log = logging.getLogger(__name__)

LOCK_PREFIX = "msgx-pump"
PG_LOCK_CLASS = 0x6D736778           # "msgx": the high half of the PostgreSQL advisory key
CHECK_EVERY_S = 1.0


class MailboxBusy(RuntimeError):
    """Another installation's pump holds the mailbox lock."""


class MailboxLockUnsupported(ConfigError):
    """The mailbox server cannot hold the lock (a Galera cluster node): msgx refuses to start."""


GALERA_REFUSAL = (
    "the mailbox server is a node of a Galera cluster (wsrep_on=ON): it cannot hold the lock that "
    "keeps a second msgx installation off the same mailbox (named locks are not cluster-wide there), "
    "so the pump does not start. Point MSGX_MAILBOX_URL at a MariaDB or MySQL server that is not a "
    "Galera node (for example the primary of an ordinary primary/replica pair); see the runbook, "
    "\"Mailbox on a Galera cluster\"")


def wsrep_on(conn: Connection) -> bool:
    """Whether this MySQL/MariaDB server is a Galera cluster node. MariaDB always has the variable
    (OFF without a cluster), MySQL does not: no row is no cluster."""
    row = conn.execute(text("SHOW VARIABLES LIKE 'wsrep_on'")).first()
    return row is not None and str(row[1]).upper() in ("ON", "1")


def holder_label() -> str:
    """How this process names itself to the other side: host and pid."""
    return f"msgx pump {socket.gethostname()} pid {os.getpid()}"


class MailboxLock:
    """The pump's lock on the mailbox server (see the module doc).

    ``acquire`` takes it or raises ``MailboxBusy``; ``keep`` (called every loop, checks at most
    every ``CHECK_EVERY_S``) notices a lost connection (a mailbox restart frees the lock) and takes
    the lock again, raising ``MailboxBusy`` if another installation got it meanwhile. While the
    mailbox is unreachable the pump goes on with what it has (decisions P1, mailbox outage at the head); nobody else can
    take the lock from a server that is down.
    """

    def __init__(self, url: str, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.label = holder_label()
        self.engine: Engine = make_engine(url, autocommit=True, single=True, program_name=self.label)
        self.mysql = self.engine.dialect.name in ("mysql", "mariadb")
        self.conn: Connection | None = None
        self.name = ""
        self._monotonic = monotonic
        self._checked = 0.0
        self._lost_logged = False

    # --- taking and giving back ------------------------------------------------------------
    def acquire(self) -> None:
        conn = self.engine.connect()
        try:
            got = self._try(conn)
        except BaseException:
            conn.close()
            raise
        if not got:
            holder = self._holder(conn)
            conn.close()
            raise MailboxBusy(
                f"the mailbox is already being processed by another msgx installation: lock {self.name!r} "
                f"on the mailbox server is held by {holder}; this pump exits without processing "
                "(one installation per mailbox; right after a PostgreSQL restart the holder may be this "
                "installation's own pump, reconnecting: it goes on by itself)")
        self.conn = conn
        self._checked = self._monotonic()
        log.info("mailbox lock %r taken by %s", self.name, self.label)

    def start(self) -> None:
        """Take the lock at the pump's start. An unreachable mailbox does not stop the pump (it
        works on what is registered, decisions P1): ``keep`` takes the lock once the server answers,
        before the pump reads a row from it."""
        try:
            self.acquire()
        except SQLAlchemyError as exc:
            log.warning("mailbox %s unreachable at start, its lock will be taken when it answers: %s",
                        server_address(self.engine), first_line(exc))
            self._lost_logged = True

    def release(self) -> None:
        conn, self.conn = self.conn, None
        if conn is None:
            return
        try:
            if self.mysql:
                conn.execute(text("SELECT RELEASE_LOCK(:n)"), {"n": self.name})
            else:
                conn.execute(text("SELECT pg_advisory_unlock(:c, :o)"), self._pg_key())
        except SQLAlchemyError:
            pass                        # a broken connection: the server has freed the lock already
        finally:
            conn.close()

    def dispose(self) -> None:
        self.release()
        self.engine.dispose()

    # --- while the pump runs -----------------------------------------------------------------
    def keep(self) -> None:
        """Make sure the lock is still ours: a liveness check at most once per ``CHECK_EVERY_S``
        while it is held; while it is not (lost, or the mailbox was down), a new attempt every call,
        so it is back before the pump's next mailbox read."""
        now = self._monotonic()
        if self.conn is not None and now - self._checked < CHECK_EVERY_S:
            return
        self._checked = now
        if self.conn is not None:
            try:
                self.conn.execute(text("SELECT 1"))
                return
            except SQLAlchemyError:
                log.warning("lost the connection that holds the mailbox lock %r; taking it again", self.name)
                self.conn.invalidate()
                self.conn.close()
                self.conn = None
        try:
            self.acquire()
        except SQLAlchemyError as exc:
            if not self._lost_logged:
                log.warning("mailbox %s unreachable, its lock cannot be taken again yet: %s",
                            server_address(self.engine), first_line(exc))
                self._lost_logged = True
            return
        self._lost_logged = False
        log.warning("mailbox lock %r taken again after a lost connection", self.name)

    @property
    def held(self) -> bool:
        return self.conn is not None

    def end_holder(self, label: str) -> tuple[str, bool] | None:
        """End the mailbox session that holds the lock if it is the one ``label`` names (a pump's
        ``holder_label``): a warm standby taking over from a dead host, whose session the server
        keeps until its TCP connection times out (for MySQL, ``wait_timeout``: hours), so no pump
        could take the lock meanwhile. Who holds it and whether it was ended (it is left alone when
        it is not ``label``: another installation's pump, or MySQL without ``performance_schema``
        cannot say), or None when nobody does. Only called once both of that host's heartbeats are past the limit."""
        with self.engine.connect() as conn:
            database = conn.execute(text("SELECT DATABASE()" if self.mysql else "SELECT current_database()")).scalar()
            self.name = _lock_name(str(database or ""))
            if self.mysql:
                cid = conn.execute(text("SELECT IS_USED_LOCK(:n)"), {"n": self.name}).scalar()
                if cid is None:
                    return None
                holder = self._mysql_holder(conn)
                ours = holder.endswith(label)
                if ours:
                    conn.execute(text(f"KILL CONNECTION {int(cid)}"))
                return holder, ours
            pid = conn.execute(text(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2 "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                "AND classid = :c AND objid = :o"), self._pg_key()).scalar()
            if pid is None:
                return None
            holder = self._pg_holder(conn)
            ours = holder.startswith(f"{label} ")
            if ours:
                conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
            return holder, ours

    # --- dialects ----------------------------------------------------------------------------
    def _try(self, conn: Connection) -> bool:
        if self.mysql and wsrep_on(conn):
            raise MailboxLockUnsupported(GALERA_REFUSAL)
        database = conn.execute(text("SELECT DATABASE()" if self.mysql else "SELECT current_database()")).scalar()
        self.name = _lock_name(str(database or ""))
        if self.mysql:
            return conn.execute(text("SELECT GET_LOCK(:n, 0)"), {"n": self.name}).scalar() == 1
        return bool(conn.execute(text("SELECT pg_try_advisory_lock(:c, :o)"), self._pg_key()).scalar())

    def _pg_key(self) -> dict[str, int]:
        """The two-int advisory key: "msgx" and a hash of the lock name (the mailbox database)."""
        objid = zlib.crc32(self.name.encode()) & 0x7FFFFFFF
        return {"c": PG_LOCK_CLASS, "o": objid}

    def _holder(self, conn: Connection) -> str:
        """Who holds the lock, as far as the server tells (never fails: 'unknown' at worst)."""
        try:
            return self._mysql_holder(conn) if self.mysql else self._pg_holder(conn)
        except SQLAlchemyError as exc:
            return f"an unknown session ({exc.__class__.__name__} reading the server's session list)"

    def _mysql_holder(self, conn: Connection) -> str:
        cid = conn.execute(text("SELECT IS_USED_LOCK(:n)"), {"n": self.name}).scalar()
        if cid is None:
            return "a session that has just let it go (try again)"
        row = conn.execute(text("SELECT HOST, USER, TIME FROM information_schema.PROCESSLIST WHERE ID = :i"),
                           {"i": cid}).first()
        where = f"host {row.HOST} (user {row.USER}, connected {row.TIME}s)" if row else "a host not visible here"
        try:
            program = conn.execute(text(
                "SELECT ATTR_VALUE FROM performance_schema.session_connect_attrs "
                "WHERE PROCESSLIST_ID = :i AND ATTR_NAME = 'program_name'"), {"i": cid}).scalar()
        except SQLAlchemyError:
            program = None
        return f"MySQL connection {cid} from {where}" + (f", {program}" if program else "")

    def _pg_holder(self, conn: Connection) -> str:
        row = conn.execute(text(
            "SELECT a.pid, a.client_addr, a.application_name, a.backend_start FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND l.classid = :c AND l.objid = :o AND l.objsubid = 2"), self._pg_key()).first()
        if row is None:
            return "a session that has just let it go (try again)"
        return (f"{row.application_name or 'an unnamed session'} (server pid {row.pid}, "
                f"from {row.client_addr or 'a local socket'}, since {row.backend_start:%Y-%m-%d %H:%M:%S})")


def _lock_name(database: str) -> str:
    """``msgx-pump:<database>``, at most 64 characters (MySQL's limit on lock names)."""
    name = f"{LOCK_PREFIX}:{database}"
    if len(name) > 64:
        name = f"{LOCK_PREFIX}:{zlib.crc32(database.encode()):08x}:{database[:40]}"
    return name
