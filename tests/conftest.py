"""Shared fixtures: real PostgreSQL, MariaDB, Redis and Kafka-wire servers, throwaway databases.

Service addresses come from MSGX_TEST_PG / MSGX_TEST_MYSQL / MSGX_TEST_REDIS / MSGX_TEST_KAFKA
(defaults: the machine's loopback services). A missing service fails the test loudly: nothing
is skipped silently.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import psycopg
import pymysql
import pytest

from msgx_engine.app import App
from msgx_engine.cli import main as cli
from msgx_engine.clock import ManualClock
from msgx_engine.config import Settings
from msgx_engine.db import make_engine
from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.store import migrate
from tests.private_servers import ServerProcess, redis_server, tansu_server

PG_ADMIN = os.environ.get("MSGX_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
MYSQL_HOST = os.environ.get("MSGX_TEST_MYSQL", "root@127.0.0.1:3306")
REDIS_URL = os.environ.get("MSGX_TEST_REDIS", "redis://127.0.0.1:6379/0")
KAFKA_BOOTSTRAP = os.environ.get("MSGX_TEST_KAFKA", "127.0.0.1:9092")

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "tests" / "data" / "sis-samples"   # public AODB samples, copied in (see its README)
# The console script of the interpreter running the tests (a bare clone installs it into .venv).
MSGX_BIN = str(Path(sys.executable).parent / "msgx")
RUN_TAG = uuid.uuid4().hex[:8]


def _mysql_parts() -> tuple[str, str, int]:
    user, _, hostport = MYSQL_HOST.partition("@")
    host, _, port = hostport.partition(":")
    return user, host, int(port or 3306)


def _require_port(host: str, port: int, what: str) -> None:
    try:
        with socket.create_connection((host, port), timeout=3):
            return
    except OSError as exc:
        pytest.fail(f"{what} is not reachable at {host}:{port} ({exc}); start it (see .ci/run)", pytrace=False)


# --- databases ------------------------------------------------------------------------------
class PgDatabases:
    """Creates databases on the test server; a migrated template makes each fresh one cheap."""

    def __init__(self) -> None:
        self.created: list[str] = []
        self.template = f"msgx_tpl_{RUN_TAG}"

    def _admin(self):
        return psycopg.connect(PG_ADMIN, autocommit=True)

    def url(self, name: str) -> str:
        base = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
        return f"{base}/{name}"

    def create(self, name: str, template: str | None = None) -> str:
        with self._admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
        self.created.append(name)
        return self.url(name)

    def ensure_template(self) -> None:
        if self.template in self.created:
            return
        url = self.create(self.template)
        engine = make_engine(url)
        migrate.upgrade(engine)
        engine.dispose()

    def fresh(self, migrated: bool = True) -> str:
        name = f"msgx_t_{RUN_TAG}_{uuid.uuid4().hex[:8]}"
        if migrated:
            self.ensure_template()
            return self.create(name, self.template)
        return self.create(name)

    def drop_all(self) -> None:
        with self._admin() as conn:
            for name in reversed(self.created):
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> pg_backend_pid()",
                    (name,))
                conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


class MysqlDatabases:
    def __init__(self) -> None:
        self.created: list[str] = []

    def _admin(self):
        user, host, port = _mysql_parts()
        return pymysql.connect(host=host, port=port, user=user, password="", autocommit=True)

    def fresh(self, with_tables: bool = True) -> str:
        name = f"msgx_t_{RUN_TAG}_{uuid.uuid4().hex[:8]}"
        with self._admin() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        self.created.append(name)
        user, host, port = _mysql_parts()
        url = f"mysql+pymysql://{user}@{host}:{port}/{name}"
        if with_tables:
            mb = Mailbox(url)
            mb.init()
            mb.dispose()
        return url

    def drop_all(self) -> None:
        with self._admin() as conn, conn.cursor() as cur:
            for name in self.created:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture(scope="session")
def pg_dbs() -> Iterator[PgDatabases]:
    _require_port("127.0.0.1", int(PG_ADMIN.rsplit(":", 1)[1].split("/")[0]), "PostgreSQL")
    dbs = PgDatabases()
    yield dbs
    dbs.drop_all()


@pytest.fixture(scope="session")
def mysql_dbs() -> Iterator[MysqlDatabases]:
    _, host, port = _mysql_parts()
    _require_port(host, port, "MariaDB")
    dbs = MysqlDatabases()
    yield dbs
    dbs.drop_all()


@pytest.fixture
def pg_url(pg_dbs: PgDatabases) -> str:
    """A fresh, migrated state database."""
    return pg_dbs.fresh()


@pytest.fixture
def mailbox_url(mysql_dbs: MysqlDatabases) -> str:
    """A fresh MariaDB mailbox with cminmsgs/coutmsgs."""
    return mysql_dbs.fresh()


@pytest.fixture
def settings(pg_url: str, mailbox_url: str, tmp_path: Path) -> Settings:
    return Settings(db_url=pg_url, mailbox_url=mailbox_url, kafka_bootstrap=None, redis_url=None,
                    home=tmp_path / "home", gap_grace_s=5.0)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def app(settings: Settings, clock: ManualClock) -> Iterator[App]:
    application = App.from_settings(settings, clock=clock)
    yield application
    application.dispose()


@pytest.fixture
def fresh_offload_worker() -> Iterator[None]:
    """No offload helper before the test and none left after it (``pipeline/large_bodies/offload.py``): the test
    starts its own and sees what its bodies make of it."""
    from msgx_engine.pipeline.large_bodies import offload

    offload.shutdown()
    yield
    offload.shutdown()


@pytest.fixture
def env_for(settings: Settings):
    """Environment for a subprocess (`msgx`, `dagster`) pointed at this test's databases."""

    def build(**extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MSGX_")}
        env.update(MSGX_DB_URL=settings.db_url or "", MSGX_MAILBOX_URL=settings.mailbox_url or "",
                   MSGX_HOME=str(settings.home))
        env.update(extra)
        return env

    return build


@pytest.fixture(scope="session")
def redis_url() -> str:
    from urllib.parse import urlparse

    u = urlparse(REDIS_URL)
    _require_port(u.hostname or "127.0.0.1", u.port or 6379, "Redis")
    return REDIS_URL


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    host, _, port = KAFKA_BOOTSTRAP.partition(":")
    _require_port(host, int(port), "Kafka-wire broker (tansu)")
    return KAFKA_BOOTSTRAP


@pytest.fixture(scope="session")
def samples() -> Path:
    if not (SAMPLES / "INDEX.tsv").exists():
        pytest.fail(f"SIS samples not found at {SAMPLES}", pytrace=False)
    return SAMPLES


# --- delivery: our own broker/Redis on free ports, and a Kafka reader -----------------
@pytest.fixture
def own_tansu() -> Iterator[ServerProcess]:
    """A private in-memory tansu broker (stopping it loses its topics, like a wiped broker)."""
    server = tansu_server()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[ServerProcess]:
    """A private redis-server with an append-only file, so a restart keeps what was written."""
    server = redis_server(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


@dataclass(frozen=True)
class KafkaRecord:
    topic: str
    partition: int
    offset: int
    key: str
    value: str
    headers: dict[str, str]


def read_topic(bootstrap: str, topic: str, at_least: int, timeout_s: float = 30.0) -> list[KafkaRecord]:
    """Every record of ``topic``: reads until it has ``at_least`` and every partition reported its end
    (tansu's watermark offsets are not reliable, its end-of-partition events are); fails at the
    deadline. Ordered by (partition, offset)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"msgx-test-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "enable.partition.eof": True})
    deadline = time.monotonic() + timeout_s
    try:
        parts: list[int] = []
        while not parts:
            meta = consumer.list_topics(topic, timeout=5).topics.get(topic)
            parts = sorted(meta.partitions) if meta is not None and not meta.error else []
            if not parts:
                if time.monotonic() > deadline:
                    pytest.fail(f"topic {topic} does not exist")
                time.sleep(0.1)
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[KafkaRecord] = []
        at_end: set[int] = set()
        while len(out) < at_least or len(at_end) < len(parts):
            if time.monotonic() > deadline:
                pytest.fail(f"topic {topic}: read {len(out)} records, expected at least {at_least}")
            m = consumer.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                continue
            at_end.discard(m.partition())
            out.append(KafkaRecord(topic, m.partition(), m.offset(), m.key().decode(), m.value().decode(),
                                   {k: v.decode() for k, v in (m.headers() or [])}))
        return sorted(out, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


@pytest.fixture
def kafka_reader():
    return read_topic


@pytest.fixture
def cli_run(settings, monkeypatch, capsys):
    """``cli_run(*argv)`` -> (exit code, stdout, stderr) of ``msgx ARGV`` run in process against the
    test's databases, with no other MSGX_ setting of the caller's environment leaking in."""
    for key in [k for k in os.environ if k.startswith("MSGX_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("MSGX_DB_URL", settings.db_url)
    monkeypatch.setenv("MSGX_MAILBOX_URL", settings.mailbox_url)
    monkeypatch.setenv("MSGX_HOME", str(settings.home))

    def call(*argv: str) -> tuple[int, str, str]:
        code = cli.main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return call


@pytest.fixture
def msgx(cli_run):
    """Run ``msgx ARGS`` in process against the test's databases; returns (exit code, stdout JSON or text)."""
    def run(*argv: str):
        code, out, err = cli_run(*argv)
        return code, (json.loads(out) if code == 0 else err)

    return run


@pytest.fixture
def kapp(settings, clock, kafka_bootstrap):
    """An App delivering to the test broker, on topics of its own (no test reads another's records)."""
    tag = uuid.uuid4().hex[:8]
    s = replace(settings, kafka_bootstrap=kafka_bootstrap, topic_msg=f"msg_{tag}", topic_schd=f"schd_{tag}")
    application = App.from_settings(s, clock=clock)
    yield application
    application.dispose()


@pytest.fixture
def env(settings, monkeypatch):
    """The process environment of an in-process Dagster job: the test's two databases, and neither
    Kafka nor Redis configured; returns the settings."""
    monkeypatch.setenv("MSGX_DB_URL", settings.db_url)
    monkeypatch.setenv("MSGX_MAILBOX_URL", settings.mailbox_url)
    monkeypatch.delenv("MSGX_KAFKA_BOOTSTRAP", raising=False)
    monkeypatch.delenv("MSGX_REDIS_URL", raising=False)
    return settings
