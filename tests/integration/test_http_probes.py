"""The probes of ``msgx serve`` (OPS-2): ``GET /healthz`` (the process is up, no
database asked) and ``GET /readyz`` (both databases reachable, the state schema current; 503 with
the reason otherwise), open without the API token, answering within seconds when a database hangs.
Real PostgreSQL and MariaDB; one test over a real socket against ``msgx serve``."""

from __future__ import annotations

import time

import httpx
import pytest
from starlette.testclient import TestClient

from msgx_engine.db import make_engine
from msgx_engine.http.app import create_app
from msgx_engine.http.probes import Readiness, readiness_check
from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.store import migrate
from tests.http_support import listening_probe, serve_process

TOKEN = "probe-test-token"
CLOSED_MAILBOX = "mysql+pymysql://root@127.0.0.1:1/none"


def probe_client(app, **kw) -> TestClient:
    return TestClient(create_app(mailbox=app.mailbox, engine=app.engine, api_token=TOKEN, **kw))


def test_probes_answer_without_the_token_and_readyz_is_ready(app):
    """With a token set, /healthz and /readyz answer 200 without it (GET and HEAD) while an API
    endpoint still refuses: a load balancer holds no token."""
    with probe_client(app) as client:
        assert client.get("/all/flights").status_code == 401
        resp = client.get("/healthz")
        assert (resp.status_code, resp.json()) == (200, {"status": "ok"})
        resp = client.get("/readyz")
        assert (resp.status_code, resp.json()) == (200, {"status": "ready"})
        assert client.head("/healthz").status_code == 200 and client.head("/readyz").status_code == 200


def test_healthz_asks_no_database(app):
    """/healthz stays 200 when neither database can be reached; /readyz says which one is missing."""
    dead_engine = make_engine("postgresql+psycopg://postgres@127.0.0.1:1/none")
    dead_mailbox = Mailbox(CLOSED_MAILBOX)
    try:
        with TestClient(create_app(mailbox=dead_mailbox, engine=dead_engine, api_token=TOKEN)) as client:
            assert client.get("/healthz").status_code == 200
            resp = client.get("/readyz")
            assert resp.status_code == 503
            assert resp.json() == {"status": "not ready", "reason": "state database unreachable (OperationalError)"}
    finally:
        dead_engine.dispose()
        dead_mailbox.dispose()


def test_readyz_is_503_with_the_reason_when_the_mailbox_is_unreachable(app):
    """The state database answers, the mailbox does not: 503 naming the mailbox, and no URL."""
    mailbox = Mailbox(CLOSED_MAILBOX)
    try:
        with TestClient(create_app(mailbox=mailbox, engine=app.engine, api_token=TOKEN)) as client:
            resp = client.get("/readyz")
    finally:
        mailbox.dispose()
    assert resp.status_code == 503
    assert resp.json() == {"status": "not ready", "reason": "mailbox unreachable (OperationalError)"}
    assert "127.0.0.1" not in resp.text and "mysql" not in resp.text


def test_readyz_is_503_when_the_schema_is_behind(app, pg_dbs, mysql_dbs):
    """A state database one migration behind: 503 saying which revision and to upgrade; a mailbox
    without its tables: 503 saying so."""
    url = pg_dbs.fresh(migrated=False)
    engine = make_engine(url)
    migrate.upgrade(engine, "0013")
    bare = Mailbox(mysql_dbs.fresh(with_tables=False))
    try:
        with TestClient(create_app(mailbox=app.mailbox, engine=engine, api_token=TOKEN)) as client:
            resp = client.get("/readyz")
        assert resp.status_code == 503
        assert resp.json()["reason"] == (f"state database schema is at revision '0013', this msgx needs "
                                         f"{migrate.head_revision()!r}: run msgx db upgrade")
        with TestClient(create_app(mailbox=bare, engine=app.engine, api_token=TOKEN)) as client:
            resp = client.get("/readyz")
        assert (resp.status_code, resp.json()["reason"]) == (503, "mailbox lacks its cminmsgs/coutmsgs tables")
    finally:
        engine.dispose()
        bare.dispose()


def test_readyz_answers_at_its_deadline_when_a_database_hangs(app):
    """A mailbox that accepts the connection and never says a word: /readyz answers 503 at its
    deadline (1 s here); while that check is still stuck, a probe answers at once instead of
    queueing another connection behind it; once the hung server drops the connection, the next
    probe names the mailbox."""
    stuck = "an earlier readiness check is still waiting for a database"
    with listening_probe() as (port, srv):
        hung = Mailbox(f"mysql+pymysql://root@127.0.0.1:{port}/none")
        readiness = Readiness(readiness_check(app.engine, hung), timeout_s=1.0)
        try:
            with TestClient(create_app(mailbox=hung, engine=app.engine, readiness=readiness)) as client:
                started = time.monotonic()
                first = client.get("/readyz")
                took = time.monotonic() - started
                assert first.status_code == 503 and took < 3.0, took
                assert first.json()["reason"] == "a database did not answer within 1 s"
                for _ in range(3):
                    started = time.monotonic()
                    again = client.get("/readyz")
                    assert time.monotonic() - started < 0.5
                    assert (again.status_code, again.json()["reason"]) == (503, stuck)
                srv.close()       # the hung server goes away: its pending connection is reset
                deadline = time.monotonic() + 30
                while (resp := client.get("/readyz")).json()["reason"] == stuck:
                    assert time.monotonic() < deadline, "the stuck readiness check never returned"
                    time.sleep(0.1)
                assert (resp.status_code, resp.json()["reason"]) == (503, "mailbox unreachable (OperationalError)")
        finally:
            hung.dispose()


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_msgx_serve_answers_the_probes_over_a_socket_without_the_token(env_for, path):
    """The real server with MSGX_API_TOKEN set: the probes answer 200 without a token, the API 401."""
    with serve_process(env_for(MSGX_API_TOKEN=TOKEN)) as (port, _proc):
        base = f"http://127.0.0.1:{port}"
        resp = httpx.get(base + path, timeout=10)
        assert resp.status_code == 200 and resp.json()["status"] in ("ok", "ready")
        assert httpx.get(base + "/all/flights", timeout=10).status_code == 401
