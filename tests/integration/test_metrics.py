"""``GET /metrics`` (OPS-2): Prometheus text computed from PostgreSQL at scrape
time, parsed with prometheus-client's own parser and checked against a queue state built through the
real pipeline plus a few rows written directly (an open head of known age, requests, the pump lock)."""

from __future__ import annotations

import os
from datetime import UTC, datetime

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text
from starlette.testclient import TestClient

from msgx_engine.clock import ManualClock
from msgx_engine.http.app import create_app
from msgx_engine.monitor.metrics import metrics_renderer
from msgx_engine.pipeline.pump import PumpOptions
from msgx_engine.store import locks
from tests.builders import envelope, gtdt


@pytest.fixture
def clock() -> ManualClock:
    """Registration times near the database's clock, which the figures measure ages against (in
    production both are the database clock)."""
    return ManualClock(datetime.now(UTC))


def scrape(app, **kw) -> dict[str, dict[tuple, float]]:
    """GET /metrics over the app; {metric name: {sorted label items: value}} for every sample."""
    client = TestClient(create_app(mailbox=app.mailbox, engine=app.engine,
                                   metrics=metrics_renderer(app.engine, "production"), **kw))
    resp = client.get("/metrics")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(resp.text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def one(metrics: dict, name: str, **labels: str) -> float:
    return metrics[name][tuple(sorted(labels.items()))]


def known_state(app) -> None:
    """3 GTDT SUCCEEDED, 1 SKIPPED(unsupported), 1 DEAD(malformed); marks not yet written (no inline
    backfill); events released and undelivered (no Kafka); then an open head 120 s old and requests."""
    for body in (gtdt("M1", (1, "A1")), gtdt("M2", (1, "A2")), gtdt("M3", (1, "A3")),
                 envelope("ZZZZ", "XXXX", "\t<X/>\n"), "<MSG><META>"):
        app.mailbox.put(body)
    app.pump(PumpOptions(exit_when_waiting=True, idle_poll_s=0.01, inline_backfill=False)).run()
    with app.engine.begin() as conn:
        conn.execute(text("INSERT INTO proc_state (msg_id, status, created_at, updated_at) VALUES "
                          "(1000, 'PENDING', now() - interval '120 seconds', now()), "
                          "(1001, 'FAILED', now(), now())"))
        conn.execute(text("INSERT INTO req_track (rtype, styp, status) VALUES ('RQFD', 'NONE', 'TIMEOUT'), "
                          "('RQFD', 'NONE', 'SENT'), ('RQRD', 'ABDG', 'REGISTERED'), ('RQRD', 'ABDG', 'DONE')"))


def test_metrics_report_the_queue_state_from_postgresql(app):
    """Queue depth and head age, messages by status and reason, dead letters,
    backfill pending and oldest age, outbox undelivered, requests open/timeout, pump liveness
    (heartbeat), mode; every series is prefixed msgx_."""
    known_state(app)
    m = scrape(app)
    assert all(name.startswith("msgx_") for name in m)
    assert one(m, "msgx_database_up") == 1
    assert one(m, "msgx_mode_info", mode="production") == 1
    assert one(m, "msgx_queue_open_messages") == 2
    assert one(m, "msgx_queue_head_id") == 1000
    assert 120 <= one(m, "msgx_queue_head_age_seconds") < 3600
    assert one(m, "msgx_messages", status="SUCCEEDED", reason="") == 3
    assert one(m, "msgx_messages", status="SKIPPED", reason="unsupported") == 1
    assert one(m, "msgx_messages", status="DEAD", reason="malformed") == 1
    assert one(m, "msgx_dead_letters") == 1
    assert one(m, "msgx_unsupported_recent_messages") == 1
    assert one(m, "msgx_backfill_pending") == 5
    assert one(m, "msgx_backfill_oldest_age_seconds") >= 0
    with app.engine.connect() as conn:
        unsent = dict(conn.execute(text("SELECT topic, count(*) FROM msg_event WHERE released_at IS NOT NULL "
                                        "AND sent_at IS NULL GROUP BY topic")).fetchall())
    assert unsent and {t: one(m, "msgx_outbox_undelivered", topic=t) for t in unsent} == unsent
    assert one(m, "msgx_outbox_dead_events") == 0
    assert one(m, "msgx_requests", rtype="RQFD", status="TIMEOUT") == 1
    assert one(m, "msgx_requests_open") == 2 and one(m, "msgx_requests_timed_out") == 1
    # the pump ran (heartbeat recorded at its start) and has exited (no lock held)
    assert one(m, "msgx_pump_lock_held") == 0
    assert 0 <= one(m, "msgx_pump_heartbeat_age_seconds") < 3600
    with app.engine.connect() as conn:
        pid = conn.execute(text("SELECT pid FROM heartbeat WHERE component = 'pump'")).scalar_one()
    assert pid == os.getpid()


def test_pump_lock_and_check_states_show_once_known(app):
    """Pump liveness reads the writer lock from pg_locks (any instance sees it); the health checks'
    states and the projection drift appear once the scheduled evaluation has run."""
    known_state(app)
    before = scrape(app)
    assert "msgx_check_failing" not in before or not before["msgx_check_failing"]
    with app.engine.connect() as holder:
        assert holder.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": locks.PUMP}).scalar_one()
        holder.commit()
        assert one(scrape(app), "msgx_pump_lock_held") == 1
        holder.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": locks.PUMP})
        holder.commit()
    app.alerter().evaluate()
    m = scrape(app)
    assert one(m, "msgx_check_failing", check="dead_letters") == 1
    assert one(m, "msgx_check_failing", check="unsupported_types") == 1
    assert one(m, "msgx_check_failing", check="request_timeouts") == 1
    assert one(m, "msgx_check_failing", check="backlog_age") == 0
    assert one(m, "msgx_check_evaluated_timestamp_seconds", check="backlog_age") > 0
    assert one(m, "msgx_projection_drift_flights") != one(m, "msgx_projection_drift_flights")   # NaN: no Redis


def test_metrics_stay_open_with_a_token_and_answer_when_postgresql_is_down(app, pg_dbs):
    """/metrics needs no token; a scrape with the state database unreachable still
    answers, with msgx_database_up 0 and the mode."""
    assert one(scrape(app, api_token="s3cret"), "msgx_database_up") == 1
    from msgx_engine.db import make_engine

    dead = make_engine("postgresql+psycopg://postgres@127.0.0.1:1/none")
    try:
        resp = TestClient(create_app(mailbox=app.mailbox, engine=dead,
                                     metrics=metrics_renderer(dead, "shadow"))).get("/metrics")
    finally:
        dead.dispose()
    families = {f.name: f for f in text_string_to_metric_families(resp.text)}
    assert resp.status_code == 200
    assert families["msgx_database_up"].samples[0].value == 0
    assert families["msgx_mode_info"].samples[0].labels == {"mode": "shadow"}
    assert "msgx_queue_open_messages" not in families
