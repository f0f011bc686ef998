"""The Dagster layer (OPS-1; DESIGN §5): definitions load, the sensor's decision,
`dagster job execute` drains in id order, and a second pump exits while one runs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
from sqlalchemy import select, text

from msgx_dagster.jobs.pump import pump_job
from msgx_dagster.resources import MsgxResource
from msgx_dagster.sensors.inbox import inbox_sensor
from msgx_engine.store.tables import proc_state, proc_state_hst
from tests.builders import gtdt

BIN = Path(sys.executable).parent




@pytest.fixture
def msgx_env(settings, monkeypatch):
    monkeypatch.setenv("MSGX_DB_URL", settings.db_url)
    monkeypatch.setenv("MSGX_MAILBOX_URL", settings.mailbox_url)
    return settings


def _evaluate(instance, cursor=None):
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources={"msgx": MsgxResource()}) as ctx:
        return inbox_sensor(ctx), ctx.cursor


def test_sensor_requests_a_run_only_when_work_exists_and_no_pump_runs(msgx_env, app):
    """US-01, OPS-2: the sensor skips on an empty mailbox, requests one long-lived pump run (unique
    run_key, cursor advanced, a tag saying why) when rows exist, and skips while a pump run is queued
    or in flight."""
    with dg.DagsterInstance.ephemeral() as instance:
        result, _ = _evaluate(instance)
        assert isinstance(result, dg.SkipReason) and "no processable" in result.skip_message
        first = app.mailbox.put(gtdt("S1", (1, "A1")))
        app.mailbox.put(gtdt("S1", (1, "B2")))
        result, cursor = _evaluate(instance, cursor="41")
        assert isinstance(result, dg.RunRequest)
        # the run's tags say what is true: where the waiting rows start, not a "top" id the
        # one-row probe cannot know (it said msgx/top_mailbox_id 1 while a thousand rows waited)
        assert "msgx/top_mailbox_id" not in result.tags
        assert result.tags["msgx/started_for"] == f"mailbox rows wait to be registered from id {first}"
        assert result.run_key == "pump-42" and json.loads(cursor)["serial"] == 42
        assert result.run_config["ops"]["pump_op"]["config"]["idle_for_s"] > 0
        assert result.tags["msgx/long_lived_pump"] == "true"     # the minute schedules yield to it
        instance.create_run_for_job(pump_job, status=dg.DagsterRunStatus.STARTED)
        result, _ = _evaluate(instance, cursor="42")
        assert isinstance(result, dg.SkipReason) and "already queued or running" in result.skip_message


def test_a_failed_pump_run_names_the_run_that_replaces_it(msgx_env, app):
    """OPS-2: the latest pump run failed (killed, out of memory); when the sensor requests the next one
    it writes an event on the failed run's page naming the replacement's run key, once."""
    with dg.DagsterInstance.ephemeral() as instance:
        failed = instance.create_run_for_job(pump_job, status=dg.DagsterRunStatus.FAILURE)
        app.mailbox.put(gtdt("S2", (1, "A1")))
        result, _ = _evaluate(instance, cursor="6")
        assert isinstance(result, dg.RunRequest) and result.run_key == "pump-7"
        notes = [e.message for e in instance.all_logs(failed.run_id) if "inbox_sensor" in (e.message or "")]
        assert notes == ["inbox_sensor started the next pump run (run key pump-7) to replace this failed one: it "
                         "goes on from the first unfinished message, so nothing this run was doing is lost"]


def test_dagster_job_execute_drains_fifty_messages_in_id_order(app, env_for, tmp_path):
    """`dagster job execute -m msgx_dagster.definitions -j pump_job` with no run config drains
    >= 50 rows and exits; terminal order equals mailbox id order (US-03 AC1)."""
    ids = [app.mailbox.put(gtdt(f"D{i % 7}", (1, f"G{i}"))) for i in range(55)]
    home = tmp_path / "dagster_home"
    home.mkdir()
    proc = subprocess.run([str(BIN / "dagster"), "job", "execute", "-m", "msgx_dagster.definitions",
                           "-j", "pump_job"], env=env_for(DAGSTER_HOME=str(home)), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with app.engine.connect() as conn:
        statuses = dict(conn.execute(select(proc_state.c.msg_id, proc_state.c.status)).fetchall())
        order = [r[0] for r in conn.execute(select(proc_state_hst.c.msg_id).order_by(proc_state_hst.c.id))]
    assert statuses == {i: "SUCCEEDED" for i in ids}
    assert order == ids
    assert all(v is not None for v in app.mailbox.processed_at(ids).values())


def _wait_until(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_two_pumps_only_one_processes(app, env_for):
    """OPS-1: while one pump holds the writer lock, a second exits at once, non-zero, with a clear
    message and without processing; the first keeps processing new rows."""
    first_ids = [app.mailbox.put(gtdt("P1", (1, f"A{i}"))) for i in range(3)]
    env = env_for()
    first = subprocess.Popen([str(BIN / "msgx"), "pump", "--idle-for", "120"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def terminal(ids):
            with app.engine.connect() as conn:
                n = conn.execute(text("SELECT count(*) FROM proc_state WHERE status = 'SUCCEEDED' "
                                      "AND msg_id = ANY(:ids)"), {"ids": ids}).scalar_one()
            return n == len(ids)

        _wait_until(lambda: terminal(first_ids), 60, "the first pump to process its rows")
        second = subprocess.run([str(BIN / "msgx"), "pump", "--drain"], env=env, capture_output=True,
                                text=True, timeout=60)
        assert second.returncode != 0
        assert "another msgx pump holds the writer lock" in second.stderr
        later = app.mailbox.put(gtdt("P1", (1, "Z9")))
        _wait_until(lambda: terminal([later]), 60, "the first pump to process a new row")
        assert first.poll() is None
    finally:
        first.terminate()
        try:
            first.wait(timeout=30)
        except subprocess.TimeoutExpired:     # seen once in CI on a loaded machine: never leave it behind
            first.kill()
            first.wait(timeout=10)


def test_backfill_job_marks_terminal_rows(msgx_env, app):
    """US-09: backfill_job writes CMINMSGS_DATE_PROCESSED for terminal messages whose mark is pending."""
    from msgx_dagster.jobs.backfill import backfill_job
    from msgx_engine.pipeline.pump import PumpOptions

    ids = [app.mailbox.put(gtdt("B1", (1, f"A{i}"))) for i in range(3)]
    app.pump(PumpOptions(inline_backfill=False)).run()
    assert not any(app.mailbox.processed_at(ids).values())
    result = backfill_job.execute_in_process(resources={"msgx": MsgxResource()})
    assert result.success
    assert all(app.mailbox.processed_at(ids).values())
