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
    check_keys = {k.asset_key for k in graph.asset_check_keys}
    assert {OUTBOX, PROJECTION} <= check_keys


def test_definitions_register_request_tracking(location):
    """DESIGN §5: request_tracking_job (singleton requests, every minute, running by default) and the
    two daily registration jobs are in the code location; the reference refresh starts stopped."""
    assert location.defs.resolve_job_def("request_tracking_job").tags.get("singleton") == "requests"
    by_job = {s.job_name: s for s in location.defs.schedules}
    assert by_job["request_tracking_job"].cron_schedule == "* * * * *"
    assert by_job["request_tracking_job"].default_status == dg.DefaultScheduleStatus.RUNNING
    assert by_job["snapshot_request_job"].default_status == dg.DefaultScheduleStatus.RUNNING
    assert by_job["reference_refresh_job"].default_status == dg.DefaultScheduleStatus.STOPPED


def test_the_stand_mapping_has_its_asset_check(location):
    """US-14 AC3, D27: the reference data asset carries the stand -> airbridge mapping check."""
    from msgx_dagster.assets.specs import REFERENCE_DATA

    graph = location.defs.resolve_asset_graph()
    assert any(k.asset_key == REFERENCE_DATA and k.name == "stand_mapping_check" for k in graph.asset_check_keys)


def test_monitor_job_is_scheduled_every_minute_as_a_singleton(location):
    """Issue 14 item 4: a * * * * * schedule, running by default, one run at a time; the checks it
    reports on are defined on the assets they describe."""
    schedule = next(s for s in location.defs.schedules if s.job_name == "monitor_job")
    assert schedule.cron_schedule == "* * * * *"
    assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    assert location.defs.resolve_job_def("monitor_job").tags.get("singleton") == "monitor"
    names = {k.name for k in location.defs.resolve_asset_graph().asset_check_keys}
    assert {"backlog_age_check", "dead_letters_check", "delivery_backlog_check", "backfill_lag_check",
            "projection_drift_check", "unsupported_types_check", "request_timeouts_check"} <= names


def test_ops3_shadow_location_keeps_the_request_schedules_off(location):
    """Issue 14 item 3 (OPS-3, D29): built for shadow mode, the three schedules that register or send
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
    """Issue 14 item 6: a Dagster code location with no MSGX_DB_URL (and no MSGX_EMBEDDED) refuses to
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
