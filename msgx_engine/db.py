"""Engine construction shared by every adapter: one place for driver names and pool settings."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.pool import NullPool


def normalise_url(url: str) -> str:
    """Make the driver explicit: with SQLAlchemy 2.1 a bare postgresql:// would mean psycopg 3
    anyway, but older releases mean psycopg2; mysql:// means PyMySQL here."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    if url.startswith("mysql://"):
        return "mysql+pymysql://" + url.split("://", 1)[1]
    return url


# A MySQL/MariaDB connection that stops answering mid-statement (a partition, a dropped NAT entry, a
# hung server: no reset, no close) fails after this long instead of holding the pump until TCP gives
# up, hours later: the intake reports the mailbox unreachable and the next pass reconnects (L13, silent connections).
# Every mailbox statement is bounded by primary key; the largest, a 10 MB package body, takes well
# under a second on a LAN, so a minute is a silence, not a slow answer.
MYSQL_IO_TIMEOUT_S = 60
# Connecting (the server's greeting, TLS, authentication) and the pool's liveness ping are tiny
# exchanges a live server answers at once; a server that accepts TCP but stays silent is given up
# after this long, so the pool's ping of a stale connection and the reconnect behind it do not add
# two more read timeouts to the one a silent mailbox already costs (the runbook promises 60 s).
MYSQL_HANDSHAKE_TIMEOUT_S = 10
# PostgreSQL (psycopg has no read timeout): TCP keepalives notice a peer that died while the session
# idles (the pump's lock session idles most of the time), and ``tcp_user_timeout`` drops a
# connection whose sent bytes stay unacknowledged this long (ms). Neither ever cuts a slow statement,
# so the long snapshot writes and archive moves are unaffected (L13).
PG_KEEPALIVES = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3,
                 "tcp_user_timeout": 60_000}


def make_engine(url: str, *, autocommit: bool = False, pool_size: int = 5, single: bool = False,
                program_name: str | None = None, io_timeout_s: float = MYSQL_IO_TIMEOUT_S) -> Engine:
    """``single``: no pool, each ``connect()`` opens its own session (a lock holder that must notice
    when its session dies). ``program_name`` is announced to the server (PostgreSQL
    ``application_name``, MySQL connection attribute ``program_name``). ``io_timeout_s``: MySQL's
    read and write timeout (``MYSQL_IO_TIMEOUT_S``)."""
    kwargs: dict = {"poolclass": NullPool} if single else {
        "pool_pre_ping": True, "pool_size": pool_size, "max_overflow": 5}
    if autocommit:
        kwargs["isolation_level"] = "AUTOCOMMIT"
    url = normalise_url(url)
    connect_args: dict[str, object] = {}
    if url.startswith("mysql"):
        if not single:
            kwargs["pool_recycle"] = 3600
        connect_args = {"connect_timeout": 5, "charset": "utf8mb4", "read_timeout": io_timeout_s,
                        "write_timeout": io_timeout_s}
        if program_name:
            connect_args["program_name"] = program_name
    elif url.startswith("postgresql"):
        connect_args = {"connect_timeout": 5, **PG_KEEPALIVES}
        if program_name:
            connect_args["application_name"] = program_name[:63]
    if connect_args:
        kwargs["connect_args"] = connect_args
    # hide_parameters: a statement's parameters (message bodies, payloads) never appear in the text of
    # an error, which is logged and stored as error_detail (OPS-2: no whole bodies in logs)
    engine = create_engine(url, hide_parameters=True, **kwargs)
    if url.startswith("mysql+pymysql"):
        event.listen(engine, "do_connect", _connect_pymysql)
    return engine


def server_address(engine: Engine) -> str:
    """The server an engine reaches, as a log line names it: host and port, never the credentials."""
    url = engine.url
    default = 3306 if url.drivername.startswith("mysql") else 5432
    return f"{url.host or 'localhost'}:{url.port or default}"


def _connect_pymysql(dialect: Any, conn_rec: Any, cargs: tuple, cparams: dict) -> Any:
    """A PyMySQL connection that shares one TLS context for the preferred mode (below)."""
    return _pymysql_connection_class()(*cargs, **cparams)


@cache
def _pymysql_connection_class() -> type:
    """PyMySQL's connection, with connecting and pinging bounded by ``MYSQL_HANDSHAKE_TIMEOUT_S``
    rather than the read timeout, and where a connection given no TLS options (PyMySQL's default
    PREFERRED mode: TLS when the server offers it, the certificate not checked) takes one context
    built once per process instead of a new one each time. Building it loads the system's CA
    certificates, about 25 ms of CPU, which a Dagster run or a pump start paid for every MariaDB
    connection it opened; the context is the same for every such connection, and an
    ``ssl.SSLContext`` is made to be shared. Explicit TLS options build their own, as before."""
    import pymysql

    class SharedPreferredTLS(pymysql.connections.Connection):
        preferred: Any = None      # the shared context, built by the first connection that needs it

        def connect(self, sock: Any = None) -> None:
            with self._short_reads():
                super().connect(sock)

        def ping(self, reconnect: bool = True) -> None:
            with self._short_reads():
                super().ping(reconnect)

        @contextmanager
        def _short_reads(self) -> Iterator[None]:
            """Reads inside bounded by ``MYSQL_HANDSHAKE_TIMEOUT_S`` (PyMySQL sets the socket's
            timeout from ``_read_timeout`` before each read, so restoring it is enough)."""
            io: Any = getattr(self, "_read_timeout", None)
            self._read_timeout = min(io, MYSQL_HANDSHAKE_TIMEOUT_S) if io else MYSQL_HANDSHAKE_TIMEOUT_S
            try:
                yield
            finally:
                self._read_timeout = io

        def _create_ssl_ctx(self, sslp: Any) -> Any:
            if not (isinstance(sslp, dict) and not sslp):
                return super()._create_ssl_ctx(sslp)
            if SharedPreferredTLS.preferred is None:     # two threads at once build two: harmless
                SharedPreferredTLS.preferred = super()._create_ssl_ctx(sslp)
            return SharedPreferredTLS.preferred

    return SharedPreferredTLS


@contextmanager
def pipelined(conn: Connection) -> Iterator[None]:
    """Send the statements issued inside the block without waiting for each result (psycopg 3
    pipeline mode): a transaction's writes cost one network round trip instead of one each.

    Errors surface when the pipeline syncs, outside SQLAlchemy's own execute; they are re-raised as
    SQLAlchemy ``DBAPIError`` so callers classify them like any other database error.
    """
    import psycopg

    raw = conn.connection.driver_connection
    if not isinstance(raw, psycopg.Connection):
        yield
        return
    with as_dbapi_errors(raw), raw.pipeline():
        yield


@contextmanager
def as_dbapi_errors(raw: Any) -> Iterator[None]:
    """Errors of statements sent on the psycopg connection ``raw`` itself (outside SQLAlchemy's
    execute: a pipeline's sync, a COPY) re-raised as SQLAlchemy ``DBAPIError``, so callers
    classify them like any other database error."""
    import psycopg

    try:
        yield
    except psycopg.Error as exc:
        raise DBAPIError.instance(None, None, exc, psycopg.Error,
                                  connection_invalidated=raw.closed or raw.broken) from exc


_DISCONNECT_MARKERS = ("server closed the connection", "terminating connection", "connection is closed",
                       "consuming input failed", "connection refused", "connection is lost", "can't reconnect")


def is_disconnect(exc: BaseException) -> bool:
    """The database session is gone (restart, network), as opposed to an error in a statement:
    not the message's or event's fault, so workers reconnect instead of counting an attempt."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    msg = str(exc).lower()
    return isinstance(exc, SQLAlchemyError) and any(s in msg for s in _DISCONNECT_MARKERS)
