"""Every Dagster job, run the way the product's users run it: a subprocess
``dagster job execute -m msgx_dagster.definitions -j <job>`` (DESIGN §4, §5), with short run config
where the job loops, each with an observable effect in the databases, Kafka or Redis."""

from __future__ import annotations

import json
import uuid

import pytest
import redis
from sqlalchemy import text

from msgx_engine.pipeline.pump import PumpOptions
from msgx_engine.sis.requests import RQRD_TYPES
from tests.builders import gtdt
from tests.dagster_support import job_runner, op_config


@pytest.fixture
def execute(env_for, tmp_path):
    """Run one job in a subprocess against this test's databases; fails with its stderr."""
    runner = job_runner(env_for, tmp_path)

    def run(job: str, run_config: dict | None = None, **env: str) -> str:
        proc = runner(job, run_config, **env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout + proc.stderr

    return run


def _scalar(app, sql: str, **params):
    with app.engine.connect() as conn:
        return conn.execute(text(sql), params).scalar_one()


def test_pump_job_drains_with_no_run_config(app, execute):
    """DESIGN §4: pump_job with no run config drains every processable row and exits."""
    ids = [app.mailbox.put(gtdt("J1", (1, f"A{i}"))) for i in range(3)]
    execute("pump_job")
    assert _scalar(app, "SELECT count(*) FROM proc_state WHERE status = 'SUCCEEDED'") == len(ids)
    assert all(app.mailbox.processed_at(ids).values())


def test_backfill_job_marks_what_the_pump_left(app, execute):
    """US-09 AC1: backfill_job (max_seconds from run config) writes CMINMSGS_DATE_PROCESSED."""
    ids = [app.mailbox.put(gtdt("J2", (1, f"A{i}"))) for i in range(3)]
    app.pump(PumpOptions(inline_backfill=False)).run()
    assert not any(app.mailbox.processed_at(ids).values())
    execute("backfill_job", op_config("backfill_op", max_seconds=5.0))
    assert all(app.mailbox.processed_at(ids).values())


def test_dispatch_job_drains_the_outbox_to_kafka(app, execute, kafka_bootstrap, kafka_reader):
    """US-07 AC1: dispatch_job with run_for_s 0 sends every released event and marks it sent."""
    topics = {"MSGX_TOPIC_MSG": f"msg-{uuid.uuid4().hex[:8]}", "MSGX_TOPIC_SCHD": f"schd-{uuid.uuid4().hex[:8]}"}
    app.mailbox.put(gtdt("J3", (1, "A1")))
    app.pump().run()
    assert _scalar(app, "SELECT count(*) FROM msg_event WHERE sent_at IS NULL") == 2
    execute("dispatch_job", op_config("dispatch_op", run_for_s=0.0), MSGX_KAFKA_BOOTSTRAP=kafka_bootstrap,
            **topics)
    assert _scalar(app, "SELECT count(*) FROM msg_event WHERE sent_at IS NULL") == 0
    (record,) = kafka_reader(kafka_bootstrap, topics["MSGX_TOPIC_MSG"], at_least=1)
    assert record.key == "J3"


def test_projection_rebuild_job_fills_redis(app, execute, own_redis):
    """D10, INV-24: projection_rebuild_job writes every current flight into flightInfo."""
    app.mailbox.put(gtdt("J4", (1, "A1")))
    app.pump().run()
    execute("projection_rebuild_job", MSGX_REDIS_URL=own_redis.url)
    client = redis.Redis.from_url(own_redis.url, decode_responses=True)
    try:
        assert json.loads(client.hget("flightInfo", "J4"))["FLID"] == "J4"
    finally:
        client.close()


def test_request_tracking_job_sends_a_registered_request(app, execute):
    """US-08 AC2: request_tracking_job (one round: run_for_s 0) writes a REGISTERED request to
    COUTMSGS and marks it SENT."""
    from msgx_engine.requests.tracker import RequestTracker

    req = RequestTracker(app.engine, app.mailbox, app.clock).register_rqrd("GLST").req_id
    execute("request_tracking_job", op_config("request_tracking_op", run_for_s=0.0))
    assert _scalar(app, "SELECT status FROM req_track WHERE req_id = :r", r=req) == "SENT"
    with app.mailbox.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM coutmsgs")).scalar_one() == 1


def test_snapshot_request_job_registers_tomorrows_rqfd(app, execute):
    """US-08, US-06: snapshot_request_job registers one RQFD (sent later by request tracking)."""
    execute("snapshot_request_job")
    assert _scalar(app, "SELECT count(*) FROM req_track WHERE rtype = 'RQFD' AND status = 'REGISTERED' "
                        "AND fday IS NOT NULL") == 1


def test_reference_refresh_job_registers_one_rqrd_per_type(app, execute):
    """D16/D17: reference_refresh_job registers an RQRD for each of the 23 reference types."""
    execute("reference_refresh_job")
    assert _scalar(app, "SELECT count(DISTINCT styp) FROM req_track WHERE rtype = 'RQRD' "
                        "AND status = 'REGISTERED'") == len(RQRD_TYPES)
