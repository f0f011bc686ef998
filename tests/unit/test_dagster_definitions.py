"""The Dagster code location loads: every job, check, schedule and sensor, the lineage graph (DESIGN §5); no server."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import dagster as dg
import pytest

from msgx_dagster.assets.specs import FLIGHT_STATE, KAFKA_MSG, KAFKA_SCHD, MAILBOX, OUTBOX, PROJECTION
from msgx_dagster.sensors.inbox import inbox_sensor


@pytest.fixture(scope="module")
def location():
    """The code location module, loaded with production URLs set (placeholders: loading connects to
    nothing); a load without them is refused (test below)."""
    with pytest.MonkeyPatch.context() as mp:
        for key in [k for k in os.environ if k.startswith("MSGX_")]:
            mp.delenv(key)
        mp.setenv("MSGX_DB_URL", "postgresql+psycopg://postgres@127.0.0.1:1/none")
        mp.setenv("MSGX_MAILBOX_URL", "mysql+pymysql://root@127.0.0.1:1/none")
        return importlib.import_module("msgx_dagster.definitions")


def test_definitions_load_with_lineage_and_singleton_pump(location):
    """One definitions module assembles jobs, the sensor, schedules and the asset graph."""
    repo = location.defs.get_repository_def()
    assert {"pump_job", "backfill_job"} <= {j.name for j in repo.get_all_jobs()}
    assert location.defs.resolve_job_def("pump_job").tags.get("singleton") == "pump"
    graph = location.defs.resolve_asset_graph()
    keys = set(graph.get_all_asset_keys())
    assert {MAILBOX, FLIGHT_STATE, OUTBOX} <= keys
    assert MAILBOX in graph.get(dg.AssetKey(["msgx", "proc_state"])).parent_keys
    assert OUTBOX in {k for k in keys if FLIGHT_STATE in graph.get(k).parent_keys}
    assert inbox_sensor.minimum_interval_seconds == 5
    assert inbox_sensor.default_status == dg.DefaultSensorStatus.RUNNING


def test_definitions_register_delivery(location):
    """DESIGN §5: dispatch_job (singleton, every minute), projection_rebuild_job and both checks are
    in the code location; topics and projection hang under the outbox / flight state."""
    assert location.defs.resolve_job_def("dispatch_job").tags.get("singleton") == "dispatch"
    assert location.defs.resolve_job_def("projection_rebuild_job").tags.get("singleton") == "projection"
    schedule = next(s for s in location.defs.schedules if s.job_name == "dispatch_job")
    assert schedule.cron_schedule == "* * * * *"
    graph = location.defs.resolve_asset_graph()
    assert OUTBOX in graph.get(KAFKA_MSG).parent_keys and OUTBOX in graph.get(KAFKA_SCHD).parent_keys
    delivery_health = {k.asset_key for k in graph.asset_check_keys if k.name == "delivery_backlog_check"}
    assert len(delivery_health) == 1 and {OUTBOX, PROJECTION} <= graph.get(delivery_health.pop()).parent_keys


def test_definitions_register_request_tracking(location):
    """DESIGN §5: request_tracking_job (singleton requests, every minute, running by default) and the
    two daily registration jobs are in the code location; the reference refresh starts stopped."""
    assert location.defs.resolve_job_def("request_tracking_job").tags.get("singleton") == "requests"
    by_job = {s.job_name: s for s in location.defs.schedules}
    assert by_job["request_tracking_job"].cron_schedule == "* * * * *"
    assert by_job["request_tracking_job"].default_status == dg.DefaultScheduleStatus.RUNNING
    assert by_job["snapshot_request_job"].default_status == dg.DefaultScheduleStatus.RUNNING
    assert by_job["reference_refresh_job"].default_status == dg.DefaultScheduleStatus.STOPPED


HEALTH_CHECKS = {"backlog_age", "dead_letters", "delivery_backlog", "backfill_lag", "projection_drift",
                 "unsupported_types", "request_timeouts", "pipeline_liveness", "stand_mapping"}


def test_every_health_check_sits_on_a_health_asset_nothing_materializes(location):
    """OPS-2: each engine check (the nine, built over the engine's list) is an asset check on a health
    asset of group ``health``, downstream of what it watches; the stand mapping on the reference data's
    (US-14 AC3, D27). No job materializes a health asset, so a pump run never hides a check."""
    from msgx_dagster.assets.specs import HEALTH_GROUP, HEALTH_REFERENCE_DATA, HEALTH_SPECS, REFERENCE_DATA
    from msgx_engine.monitor.checks import CHECKS as ENGINE_CHECKS

    graph = location.defs.resolve_asset_graph()
    health = {s.key for s in HEALTH_SPECS}
    on = {k.name: k.asset_key for k in graph.asset_check_keys}
    assert set(on) == {f"{name}_check" for name in ENGINE_CHECKS} >= {f"{name}_check" for name in HEALTH_CHECKS}
    assert set(on.values()) == health
    assert on["stand_mapping_check"] == HEALTH_REFERENCE_DATA
    assert REFERENCE_DATA in graph.get(HEALTH_REFERENCE_DATA).parent_keys
    assert all(graph.get(k).group_name == HEALTH_GROUP and not graph.get(k).is_materializable for k in health)


def test_check_descriptions_name_the_cause_and_a_command_in_the_operators_words(location):
    """Each check's description says what a failure means and the first command (a backtick-quoted
    `msgx ...` or a job to launch), and points at its runbook section; no internal ids."""
    import re

    from msgx_dagster.checks import CHECK_DEFS

    for name, check_def in CHECK_DEFS.items():
        spec = next(iter(check_def.check_specs))
        text = spec.description or ""
        assert text.startswith("Fails ") and "docs/runbook.md#" in text, name
        assert re.search(r"`(msgx|redis-cli) [^`]+`", text), name
        assert not re.search(r"\b(OPS|US|FS|D|P|M)-?\d+\b|issue \d+", text), (name, text)


def test_health_sensor_runs_every_30_s_by_default_and_monitor_job_is_on_demand(location):
    """OPS-2: the health sensor (not a schedule) evaluates the checks, RUNNING by default, often enough
    that a stall is seen within two minutes; monitor_job stays, as a singleton launched by hand."""
    sensors = {s.name: s for s in location.defs.sensors}
    health = sensors["health_sensor"]
    assert health.default_status == dg.DefaultSensorStatus.RUNNING
    assert health.minimum_interval_seconds == 30 and not health.has_jobs
    assert location.defs.resolve_job_def("monitor_job").tags.get("singleton") == "monitor"
    assert not [s for s in location.defs.schedules if s.job_name == "monitor_job"]


def test_ops3_shadow_location_keeps_the_request_schedules_off(location):
    """OPS-3, D29: built for shadow mode, the three schedules that register or send
    AODB requests default to STOPPED, and a tick (someone turned one on) is skipped with the reason;
    the others run as in production. In production the request schedules keep their defaults."""
    shadow = {s.job_name: s for s in location.build_defs(shadow=True).schedules}
    production = {s.job_name: s for s in location.build_defs(shadow=False).schedules}
    requests = {"request_tracking_job", "snapshot_request_job", "reference_refresh_job"}
    assert set(shadow) == set(production)
    for name in requests:
        assert shadow[name].default_status == dg.DefaultScheduleStatus.STOPPED
        tick = shadow[name].evaluate_tick(dg.build_schedule_context())
        assert not tick.run_requests and "shadow mode" in (tick.skip_message or "")
    for name in set(shadow) - requests:
        assert shadow[name].default_status == production[name].default_status == dg.DefaultScheduleStatus.RUNNING
    with dg.instance_for_test() as instance:     # the tick looks for an active tracking run (P18)
        tick = production["request_tracking_job"].evaluate_tick(dg.build_schedule_context(instance=instance))
        assert tick.run_requests


def test_item6_code_location_without_urls_refuses_to_load(tmp_path):
    """A Dagster code location with no MSGX_DB_URL (and no MSGX_EMBEDDED) refuses to
    load with a clear message instead of starting the embedded PostgreSQL; so does one with an
    unknown MSGX_MODE."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSGX_")}
    env["MSGX_HOME"] = str(tmp_path)
    load = [sys.executable, "-c", "import msgx_dagster.definitions"]
    proc = subprocess.run(load, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "MSGX_DB_URL and MSGX_MAILBOX_URL are not set" in proc.stderr and "MSGX_EMBEDDED=1" in proc.stderr
    assert not (tmp_path / "pgdata").exists(), "the embedded server was started"
    env.update(MSGX_DB_URL="postgresql+psycopg://x@127.0.0.1:1/y", MSGX_MAILBOX_URL="mysql+pymysql://x@127.0.0.1:1/y",
               MSGX_MODE="staging")
    proc = subprocess.run(load, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "MSGX_MODE='staging' is not one of production, shadow" in proc.stderr


def test_the_daemon_evaluates_sensors_in_threads_in_both_instances(tmp_path):
    """OPS-2: deploy/dagster.yaml and the instance `msgx demo` writes both turn the daemon's sensor
    threads on (the health sensor never delays inbox_sensor); Dagster accepts the block."""
    from pathlib import Path

    import yaml

    from msgx_engine.demo.instance import instance_yaml

    deploy = yaml.safe_load((Path(__file__).resolve().parents[2] / "deploy" / "dagster.yaml").read_text("utf-8"))
    demo = yaml.safe_load(instance_yaml("postgresql+psycopg2://postgres@/dagster?host=/s&port=5432"))
    assert deploy["sensors"] == demo["sensors"] == {"use_threads": True, "num_workers": 4}
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump({"sensors": deploy["sensors"]}), "utf-8")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert instance.get_settings("sensors") == deploy["sensors"]
