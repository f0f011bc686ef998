"""The Dagster code location loads: every job, check, schedule and sensor, the lineage graph (DESIGN §5); no server."""

from __future__ import annotations

import dagster as dg

from msgx_dagster.assets.specs import FLIGHT_STATE, KAFKA_MSG, KAFKA_SCHD, MAILBOX, OUTBOX, PROJECTION
from msgx_dagster.definitions import defs
from msgx_dagster.sensors.inbox import inbox_sensor


def test_definitions_load_with_lineage_and_singleton_pump():
    """One definitions module assembles jobs, the sensor, schedules and the asset graph."""
    repo = defs.get_repository_def()
    assert {"pump_job", "backfill_job"} <= {j.name for j in repo.get_all_jobs()}
    assert defs.resolve_job_def("pump_job").tags.get("singleton") == "pump"
    graph = defs.resolve_asset_graph()
    keys = set(graph.get_all_asset_keys())
    assert {MAILBOX, FLIGHT_STATE, OUTBOX} <= keys
    assert MAILBOX in graph.get(dg.AssetKey(["msgx", "proc_state"])).parent_keys
    assert OUTBOX in {k for k in keys if FLIGHT_STATE in graph.get(k).parent_keys}
    assert inbox_sensor.minimum_interval_seconds == 5
    assert inbox_sensor.default_status == dg.DefaultSensorStatus.RUNNING


def test_definitions_register_delivery():
    """DESIGN §5: dispatch_job (singleton, every minute), projection_rebuild_job and both checks are
    in the code location; topics and projection hang under the outbox / flight state."""
    assert defs.resolve_job_def("dispatch_job").tags.get("singleton") == "dispatch"
    assert defs.resolve_job_def("projection_rebuild_job").tags.get("singleton") == "projection"
    schedule = next(s for s in defs.schedules if s.job_name == "dispatch_job")
    assert schedule.cron_schedule == "* * * * *"
    graph = defs.resolve_asset_graph()
    assert OUTBOX in graph.get(KAFKA_MSG).parent_keys and OUTBOX in graph.get(KAFKA_SCHD).parent_keys
    check_keys = {k.asset_key for k in graph.asset_check_keys}
    assert {OUTBOX, PROJECTION} <= check_keys


def test_definitions_register_request_tracking():
    """DESIGN §5: request_tracking_job (singleton requests, every minute, running by default) and the
    two daily registration jobs are in the code location; the reference refresh starts stopped."""
    assert defs.resolve_job_def("request_tracking_job").tags.get("singleton") == "requests"
    by_job = {s.job_name: s for s in defs.schedules}
    assert by_job["request_tracking_job"].cron_schedule == "* * * * *"
    assert by_job["request_tracking_job"].default_status == dg.DefaultScheduleStatus.RUNNING
    assert by_job["snapshot_request_job"].default_status == dg.DefaultScheduleStatus.RUNNING
    assert by_job["reference_refresh_job"].default_status == dg.DefaultScheduleStatus.STOPPED


def test_the_stand_mapping_has_its_asset_check():
    """US-14 AC3, D27: the reference data asset carries the stand -> airbridge mapping check."""
    from msgx_dagster.assets.specs import REFERENCE_DATA

    graph = defs.resolve_asset_graph()
    assert any(k.asset_key == REFERENCE_DATA and k.name == "stand_mapping_check" for k in graph.asset_check_keys)


def test_monitor_job_is_scheduled_every_minute_as_a_singleton():
    """Issue 14 item 4: a * * * * * schedule, running by default, one run at a time; the checks it
    reports on are defined on the assets they describe."""
    schedule = next(s for s in defs.schedules if s.job_name == "monitor_job")
    assert schedule.cron_schedule == "* * * * *"
    assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    assert defs.resolve_job_def("monitor_job").tags.get("singleton") == "monitor"
    names = {k.name for k in defs.resolve_asset_graph().asset_check_keys}
    assert {"backlog_age_check", "dead_letters_check", "delivery_backlog_check", "backfill_lag_check",
            "projection_drift_check", "unsupported_types_check", "request_timeouts_check"} <= names
