"""A stopped installation says so and pages nobody (OPS-4, OPS-2; decision M26): after `msgx cutover
stop-writes`, with mailbox rows and open messages waiting and no pump, the pipeline_liveness and
backlog_age checks pass naming "writes stopped for cut-over at mailbox id W (by NAME, at TIME)", msgx's
own alerts stay silent, ``/metrics`` exports the stop beside ``msgx_pipeline_stalled 0``, `msgx
status` prints it, and the Dagster ticks (inbox_sensor, the dispatch schedule, health_sensor) start
nothing and show it. The same waiting work with writes reopened (`resume`) fails and pages: the
stop is the only reason for the silence. Real PostgreSQL and MariaDB."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import dagster as dg

from msgx_dagster.resources import MsgxResource
from msgx_dagster.schedules import dispatch_schedule
from msgx_dagster.sensors.health import health_sensor
from msgx_dagster.sensors.inbox import inbox_sensor
from msgx_engine.monitor import names
from tests.builders import gtdt
from tests.metrics_support import scrape
from tests.pipeline_support import register

STOPPED = "writes stopped for cut-over at mailbox id"
QUIET = (names.PIPELINE_LIVENESS, names.BACKLOG_AGE)


def put_aged(app, n: int, age_s: float) -> None:
    stamp = (datetime.now() - timedelta(seconds=age_s)).replace(microsecond=0)
    for i in range(n):
        app.mailbox.put(gtdt(f"Q{i}", (1, "A1")), received_at=stamp)


def gauges(app) -> dict[str, float]:
    return {name: family.samples[0].value for name, family in scrape(app.engine).items()
            if name.startswith(("msgx_cutover_", "msgx_pipeline_stalled"))}


def signed(cli_run, *argv: str) -> None:
    code, out, err = cli_run(*argv, "--operator", "ops.wang", "--reason", "go-live")
    assert code == 0, out + err


def test_a_stopped_installation_says_so_and_pages_nobody_for_that_reason_only(cli_run, app):
    put_aged(app, 3, 300)
    register(app)                  # open messages, registered long ago (the manual clock's 2026-01-01)
    put_aged(app, 2, 300)          # and rows nobody registered, five minutes old
    signed(cli_run, "cutover", "stop-writes")

    evaluation = app.alerter().evaluate()
    results = {r.name: r for r in evaluation.results}
    for name in QUIET:
        assert results[name].passed and STOPPED in results[name].summary, results[name].summary
        assert "by ops.wang" in str(results[name].metadata["cutover"])
    assert evaluation.failing == [] and evaluation.changed == []
    m = gauges(app)
    assert (m["msgx_cutover_writes_stopped"], m["msgx_cutover_watermark"], m["msgx_pipeline_stalled"]) == (1, 0, 0)
    assert m["msgx_cutover_stopped_timestamp_seconds"] > 0
    code, out, _ = cli_run("status")
    assert code == 0 and f"CUT-OVER: {STOPPED} 0 (by ops.wang, at " in out, out
    code, out, _ = cli_run("status", "--json")
    assert code == 0 and json.loads(out)["cutover"].startswith(f"{STOPPED} 0 (by ops.wang")

    signed(cli_run, "cutover", "resume")
    evaluation = app.alerter().evaluate()
    assert set(QUIET) <= set(evaluation.failing) and set(QUIET) <= set(evaluation.changed)
    m = gauges(app)
    assert (m["msgx_cutover_writes_stopped"], m["msgx_pipeline_stalled"]) == (0, 1)


def test_the_dagster_ticks_start_nothing_and_the_checks_show_the_stop(cli_run, env, app):
    """inbox_sensor and the dispatch schedule skip naming the stop (with work waiting, before the
    stop they start runs); health_sensor records the liveness check passed with it."""
    put_aged(app, 2, 300)
    resources = {"msgx": MsgxResource()}
    with dg.instance_for_test() as instance:
        with dg.build_sensor_context(instance=instance, resources=resources) as ctx:
            assert isinstance(inbox_sensor(ctx), dg.RunRequest)
        with dg.build_schedule_context(instance=instance) as ctx:
            assert isinstance(dispatch_schedule(ctx), dg.RunRequest)
        signed(cli_run, "cutover", "stop-writes")
        with dg.build_sensor_context(instance=instance, resources=resources) as ctx:
            skipped = inbox_sensor(ctx)
        assert isinstance(skipped, dg.SkipReason) and STOPPED in (skipped.skip_message or "")
        with dg.build_schedule_context(instance=instance) as ctx:
            skipped = dispatch_schedule(ctx)
        assert isinstance(skipped, dg.SkipReason) and STOPPED in (skipped.skip_message or "")
        with dg.build_sensor_context(instance=instance, resources=resources) as ctx:
            data = health_sensor.evaluate_tick(ctx)
    liveness = {e.check_name: e for e in data.asset_events}["pipeline_liveness_check"]
    assert liveness.passed and STOPPED in (liveness.description or "")
    assert STOPPED in str(liveness.metadata["cutover"].value)
