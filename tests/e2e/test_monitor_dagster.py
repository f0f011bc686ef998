"""Health in the Dagster UI (OPS-2): the health checks sit on health assets nothing materializes and the
health sensor records an evaluation of each every tick, so a failing check stays visible after the
pump materializes its assets, and each way the pipeline can stall shows on ``pipeline_liveness_check``.

Real Dagster where Dagster is the subject: a test instance, the code location loaded in process and
read back through Dagster's own GraphQL schema (what the UI asks), real ``pump_job`` runs. The sensor
tick is driven in process; its asset events are recorded the way the daemon records them
(``report_runless_asset_event``, dagster/_daemon/sensor.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime, timedelta

import dagster as dg
import pytest
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.context import WorkspaceProcessContext, WorkspaceRequestContext
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster_graphql.test.utils import execute_dagster_graphql, infer_repository_selector
from sqlalchemy import text

from msgx_dagster.assets.specs import HEALTH_PROCESSING, HEALTH_SPECS, PROC_STATE, health_asset
from msgx_dagster.checks import CHECK_DEFS
from msgx_dagster.jobs.monitor import monitor_job
from msgx_dagster.jobs.pump import pump_job
from msgx_dagster.resources import MsgxResource
from msgx_dagster.sensors.health import health_sensor
from msgx_engine.monitor.checks import CHECKS
from msgx_engine.monitor.figures import figures
from tests.conftest import MSGX_BIN
from tests.http_support import make_dead_letter, webhook

CHECKS_QUERY = """
query HealthChecks($keys: [AssetKeyInput!]) {
  assetNodes(assetKeys: $keys) {
    assetKey { path }
    groupName
    assetChecksOrError {
      ... on AssetChecks {
        checks {
          name
          canExecuteIndividually
          jobNames
          executionForLatestMaterialization {
            status
            timestamp
            evaluation { severity description metadataEntries { label } }
          }
        }
      }
    }
  }
}
"""

SENSOR_QUERY = """
query Sensor($selector: SensorSelector!) {
  sensorOrError(sensorSelector: $selector) { ... on Sensor { sensorState { id status } } }
}
"""

STOP_SENSOR = """
mutation Stop($id: String!) {
  stopSensor(id: $id) { ... on StopSensorMutationResult { instigationState { status } } }
}
"""


@pytest.fixture
def location_env(settings, monkeypatch):
    """The code location's environment: this test's databases, nothing else of the machine's."""
    for key in [k for k in os.environ if k.startswith("MSGX_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("MSGX_DB_URL", settings.db_url)
    monkeypatch.setenv("MSGX_MAILBOX_URL", settings.mailbox_url)
    monkeypatch.setenv("MSGX_HOME", str(settings.home))
    return monkeypatch


@pytest.fixture
def instance(location_env) -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as test_instance:
        yield test_instance


@pytest.fixture
def ui(instance) -> Iterator[WorkspaceRequestContext]:
    """What the webserver answers from: the code location loaded in process over the test instance."""
    origin = InProcessCodeLocationOrigin(LoadableTargetOrigin(module_name="msgx_dagster.definitions"),
                                         location_name="msgx")
    with WorkspaceProcessContext(instance, InProcessWorkspaceLoadTarget(origin)) as process:
        yield process.create_request_context()


def tick(instance: dg.DagsterInstance, cursor: str | None = None):
    """One health_sensor tick, its asset events recorded as the daemon records them."""
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources={"msgx": MsgxResource()}) as context:
        data = health_sensor.evaluate_tick(context)
    for event in data.asset_events:
        instance.report_runless_asset_event(event)
    return data


def shown_checks(ui: WorkspaceRequestContext) -> dict[str, dict | None]:
    """check name -> what the UI shows for it (None: "Not evaluated"), over every health asset."""
    keys = [{"path": spec.key.path} for spec in HEALTH_SPECS]
    nodes = execute_dagster_graphql(ui, CHECKS_QUERY, {"keys": keys}).data["assetNodes"]
    assert {n["groupName"] for n in nodes} == {"health"} and len(nodes) == len(HEALTH_SPECS)
    checks = [c for n in nodes for c in n["assetChecksOrError"]["checks"]]
    for c in checks:     # the UI's "Execute" button: clicking a check still evaluates it
        assert c["canExecuteIndividually"] == "CAN_EXECUTE" and c["jobNames"], c
    return {c["name"]: c["executionForLatestMaterialization"] for c in checks}


def evaluations(data) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in data.asset_events}


def put_waiting_rows(app, n: int, age_s: float = 120.0) -> None:
    """``n`` mailbox rows the AODB wrote ``age_s`` ago (past the liveness grace) that nobody registered."""
    at = datetime.now() - timedelta(seconds=age_s)     # the mailbox keeps local wall time, as the AODB writes it
    for i in range(n):
        app.mailbox.put(f"<MSG><META><SNDR>AODB</SNDR><SEQN>{i}</SEQN></META></MSG>", received_at=at)


def assert_stalled(data, *causes: str) -> dg.AssetCheckEvaluation:
    liveness = evaluations(data)["pipeline_liveness_check"]
    assert liveness.asset_key == HEALTH_PROCESSING and not liveness.passed
    assert liveness.severity == dg.AssetCheckSeverity.ERROR
    text = liveness.description or ""
    assert "mailbox row(s) wait" in text and "`msgx status`" in text, text
    for cause in causes:
        assert cause in text, text
    return liveness


def test_a_failing_check_stays_visible_after_the_pump_materializes(ui, instance, app):
    """OPS-2: with a dead letter the health sensor ticks, then a pump run materializes proc_state; the UI
    (GraphQL, as the webserver answers it) still shows dead_letters_check failed with the figures, never
    "Not evaluated", and every one of the nine checks, stand_mapping_check included, shows a result."""
    make_dead_letter(app)
    started = time.monotonic()
    data = tick(instance)
    tick_s = time.monotonic() - started
    assert set(evaluations(data)) == {f"{name}_check" for name in CHECKS}
    assert "failing" in (data.skip_message or "") and "dead_letters" in (data.skip_message or "")

    run = pump_job.execute_in_process(instance=instance, resources={"msgx": MsgxResource()})
    assert run.success
    materialized = instance.fetch_materializations(PROC_STATE, limit=1).records
    assert materialized, "the pump run materialized proc_state"

    shown = shown_checks(ui)
    assert set(shown) == {f"{name}_check" for name in CHECKS} and all(shown.values()), shown
    dead = shown["dead_letters_check"]
    assert dead is not None and dead["status"] == "FAILED" and dead["evaluation"]["severity"] == "WARN"
    assert materialized[0].timestamp > dead["timestamp"], "the check's evaluation is older than the materialization"
    assert "1 dead letter" in dead["evaluation"]["description"]
    assert {"dead", "waiting"} <= {m["label"] for m in dead["evaluation"]["metadataEntries"]}, "figures and the list"
    stand = shown["stand_mapping_check"]
    assert stand is not None
    assert (stand["status"] == "SUCCEEDED") == app.check("stand_mapping").passed
    assert tick_s < 10, f"a tick took {tick_s:.1f} s"


def test_alerts_once_across_ticks_and_monitor_job_and_a_click_agree(instance, app, location_env):
    """OPS-2: two ticks with a dead letter post the webhook once (state changes, not every tick); the
    second tick records only what fails (the passing checks are recorded again after 5 minutes); the
    on-demand monitor_job records every check without posting again, and a clicked check agrees
    without touching the alert state."""
    make_dead_letter(app)
    with webhook() as hook:
        location_env.setenv("MSGX_ALERT_WEBHOOK", hook.url)
        first = tick(instance)
        second = tick(instance, first.cursor)
        failing = {name for name, e in evaluations(first).items() if not e.passed}
        assert "dead_letters_check" in failing and len(evaluations(first)) == len(CHECKS)
        assert set(evaluations(second)) == failing and not evaluations(second)["dead_letters_check"].passed
        dead_posts = [t for t in hook.texts() if "dead_letters" in t]
        assert len(dead_posts) == 1 and "dead_letters FAILING" in dead_posts[0]
        result = monitor_job.execute_in_process(instance=instance, resources={"msgx": MsgxResource()})
        assert result.success
        recorded = {e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data
                    for e in result.all_events if e.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION}
        assert set(recorded) == {f"{name}_check" for name in CHECKS}
        assert not recorded["dead_letters_check"].passed
        assert recorded["dead_letters_check"].asset_key == health_asset("dead_letters")
        clicked = CHECK_DEFS["dead_letters"](msgx=MsgxResource())
        assert not clicked.passed and clicked.metadata["dead"].value == 1
        assert [t for t in hook.texts() if "dead_letters" in t] == dead_posts, "no second dead_letters alert"


def test_an_unreachable_database_fails_every_check_with_the_reason(instance, location_env):
    """OPS-2: when msgx's state database does not answer, the tick records every check failed (error)
    saying it could not be evaluated, instead of leaving the last green results standing."""
    location_env.setenv("MSGX_DB_URL", "postgresql+psycopg://postgres@127.0.0.1:1/nothing")
    data = tick(instance)
    recorded = evaluations(data)
    assert set(recorded) == {f"{name}_check" for name in CHECKS}
    for e in recorded.values():
        assert not e.passed and e.severity == dg.AssetCheckSeverity.ERROR
        assert "state database could not be read" in (e.description or "") and "`msgx status`" in (e.description or "")
    assert (data.skip_message or "").startswith("not evaluated")


def test_a_stopped_inbox_sensor_is_a_stalled_pipeline(ui, instance, app):
    """OPS-2 (pipeline liveness): the operator stops inbox_sensor in the UI, rows wait in the mailbox
    past the grace: the next tick fails pipeline_liveness_check and says the sensor is stopped."""
    assert evaluations(tick(instance))["pipeline_liveness_check"].passed
    selector = {**infer_repository_selector(ui), "sensorName": "inbox_sensor"}
    sensor = execute_dagster_graphql(ui, SENSOR_QUERY, {"selector": selector}).data["sensorOrError"]
    stopped = execute_dagster_graphql(ui, STOP_SENSOR, {"id": sensor["sensorState"]["id"]}).data["stopSensor"]
    assert stopped["instigationState"]["status"] == "STOPPED"
    put_waiting_rows(app, 50)
    liveness = assert_stalled(tick(instance), "inbox_sensor is stopped")
    assert liveness.metadata["inbox_sensor"].value == "stopped"
    assert liveness.metadata["unregistered_rows"].value == 50


def test_pump_runs_failing_at_start_are_a_stalled_pipeline(instance, app, location_env):
    """OPS-2 (pipeline liveness): pump_job runs fail as they start (here a refused configuration, as a
    crash loop would, twice); rows wait: the tick fails pipeline_liveness_check naming the failed run."""
    put_waiting_rows(app, 5)
    location_env.setenv("MSGX_MODE", "staging")
    for _ in range(2):
        run = pump_job.execute_in_process(instance=instance, resources={"msgx": MsgxResource()},
                                          raise_on_error=False)
        assert not run.success
    location_env.delenv("MSGX_MODE")
    liveness = assert_stalled(tick(instance), f"the latest pump_job run {run.run_id[:8]} failed")
    assert liveness.metadata["latest_pump_run"].value == f"FAILURE {run.run_id}"


def test_a_killed_pump_is_a_stalled_pipeline(instance, app, env_for, settings):
    """OPS-2 (pipeline liveness): a long-lived pump is killed (SIGKILL: its lock is released, its
    heartbeat stops); rows wait. Once the heartbeat is a minute old (backdated: the minute is not
    waited out) the tick fails pipeline_liveness_check with the pump not alive."""
    pump = subprocess.Popen([MSGX_BIN, "pump", "--idle-for", "300"], env=env_for(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not figures(app.engine).pump_lock_held:
            assert pump.poll() is None, pump.stderr.read() if pump.stderr else ""
            assert time.monotonic() < deadline, "the pump never took its lock"
            time.sleep(0.1)
        assert evaluations(tick(instance))["pipeline_liveness_check"].passed
    finally:
        pump.send_signal(signal.SIGKILL)
        pump.wait(30)
    deadline = time.monotonic() + 30
    while figures(app.engine).pump_lock_held:
        assert time.monotonic() < deadline, "the killed pump's lock was never released"
        time.sleep(0.1)
    with app.engine.begin() as conn:
        conn.execute(text("UPDATE heartbeat SET beat_at = beat_at - interval '90 seconds', "
                          "started_at = started_at - interval '90 seconds'"))
    put_waiting_rows(app, 3)
    liveness = assert_stalled(tick(instance))
    assert liveness.metadata["pump_alive"].value is False
    assert "no pump is running" in (liveness.description or "")
