"""What the health sensor records (OPS-2): every failing result and every change at each tick, a
passing result again only after five minutes, so the checks stay fresh in the UI without filling
Dagster's event log with "passed" (no server: pure function of results and the sensor's cursor)."""

from __future__ import annotations

from msgx_dagster.sensors.health import REFRESH_S, worth_recording
from msgx_engine.monitor.checks import CheckResult


def results(**passed: bool) -> list[CheckResult]:
    return [CheckResult(name, ok, f"{name} {'ok' if ok else 'failing'}") for name, ok in passed.items()]


def names(chosen: list[CheckResult]) -> list[str]:
    return [r.name for r in chosen]


def test_first_tick_records_everything_then_only_failures_changes_and_stale_passes():
    chosen, cursor = worth_recording(results(a=True, b=False), None, 1000.0)
    assert names(chosen) == ["a", "b"]
    chosen, cursor = worth_recording(results(a=True, b=False), cursor, 1030.0)
    assert names(chosen) == ["b"], "an unchanged pass waits; a failure is recorded every tick"
    chosen, cursor = worth_recording(results(a=False, b=True), cursor, 1060.0)
    assert names(chosen) == ["a", "b"], "both changed"
    chosen, cursor = worth_recording(results(a=True, b=True), cursor, 1090.0)
    assert names(chosen) == ["a"]
    chosen, cursor = worth_recording(results(a=True, b=True), cursor, 1060.0 + REFRESH_S)
    assert names(chosen) == ["b"], "b's last record is five minutes old, a's is not"


def test_an_unreadable_cursor_or_a_new_check_records_it():
    chosen, cursor = worth_recording(results(a=True), "not json", 1000.0)
    assert names(chosen) == ["a"]
    chosen, _ = worth_recording(results(a=True, new=True), cursor, 1010.0)
    assert names(chosen) == ["new"]
    chosen, _ = worth_recording(results(a=True), '{"a": "x"}', 1010.0)
    assert names(chosen) == ["a"]


def test_the_recorded_evaluations_cross_the_code_server_boundary():
    """The daemon receives a sensor's result from the code server serialized: a tick's check
    evaluations (figures and the dead-letter table included) survive Dagster's serdes unchanged."""
    import dagster as dg
    from dagster._core.definitions.sensor_definition import SensorExecutionData
    from dagster._serdes import deserialize_value, serialize_value

    from msgx_dagster.jobs.monitor import check_evaluation

    result = CheckResult("dead_letters", False, "1 dead letter(s) wait", 1.0, {"dead": 1}, warn_only=True,
                         rows=({"mailbox_id": 900, "type": "FLOP", "reason": "malformed"},))
    data = SensorExecutionData(asset_events=[check_evaluation(result)], skip_message="checks: failing dead_letters")
    back = deserialize_value(serialize_value(data), SensorExecutionData)
    (event,) = back.asset_events
    assert isinstance(event, dg.AssetCheckEvaluation) and event.check_name == "dead_letters_check"
    assert event.asset_key == dg.AssetKey(["msgx", "health", "processing"]) and not event.passed
    assert event.severity == dg.AssetCheckSeverity.WARN
    assert event.metadata["waiting"].value.records[0].data["mailbox_id"] == 900
