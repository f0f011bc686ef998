"""The 48 hours after a cut-over (OPS-4: 切流后 48 小时观察，24 小时内具备经演练的回滚能力; decision O23):
a shadow promoted with `msgx cutover promote` is watched hour by hour from the promote on. The
health tick's readings of the promoted installation (dead letters, the oldest undelivered event,
the worst of each hour) are its record; `msgx compare --summary` reports the window (who took over,
when, until when rollback stays possible, watching / failed), and the hourly compare job, which has
no reference on a production installation, reports it on the parallel_run asset. Real PostgreSQL
and MariaDB; the cut-over commands as an operator runs them."""

from __future__ import annotations

import json
from dataclasses import replace

import dagster as dg
from sqlalchemy import text

from msgx_dagster.assets.specs import PARALLEL_RUN
from msgx_dagster.jobs.compare import compare_job
from msgx_dagster.resources import MsgxResource
from msgx_dagster.schedules import compare_schedule
from msgx_engine.app import App
from msgx_engine.compare.observation import DWELL_LIMIT_S
from tests.builders import gtdt
from tests.cutover_support import ok, run_as, signed  # noqa: F401 - run_as is a fixture

OUTAGE_S = 600


def summary(run_as, env: dict[str, str]) -> tuple[int, dict]:  # noqa: F811 - the fixture, passed on
    code, out, err = run_as(env, "compare", "--summary", "--since", "7d", "--json")
    assert code in (0, 1), out + err
    return code, json.loads(out)["observation"]


def test_the_promoted_installation_is_watched_for_48_hours_and_the_window_is_reported(
        settings, pg_dbs, clock, run_as):  # noqa: F811 - the fixture from tests.cutover_support
    base = {"MSGX_MAILBOX_URL": settings.mailbox_url, "MSGX_HOME": str(settings.home)}
    a, b_url = {**base, "MSGX_DB_URL": settings.db_url}, pg_dbs.fresh()
    shadow, live = {**base, "MSGX_DB_URL": b_url, "MSGX_MODE": "shadow"}, {**base, "MSGX_DB_URL": b_url}
    ok(run_as(shadow, "pump", "--drain"))                 # the shadow records its role
    ok(run_as(a, *signed("cutover", "stop-writes")))
    with dg.instance_for_test() as instance, dg.build_schedule_context(instance=instance) as ctx:
        assert isinstance(compare_schedule(ctx), dg.SkipReason)      # a production installation, no reference
    ok(run_as(live, *signed("cutover", "promote", "--from", settings.db_url)))
    promoted = App.from_settings(replace(settings, db_url=b_url), clock=clock)
    try:
        promoted.alerter().evaluate()                     # the health tick, every 30 s under Dagster
        code, watch = summary(run_as, live)
        assert code == 1 and watch is not None          # the parallel-run verdict: no comparison recorded
        assert (watch["took_over"], watch["watermark"], watch["by"]) == ("promote", 0, "ops.wang")
        assert (watch["state"], watch["rollback_open"], watch["health_readings"]) == ("watching", True, 1)
        assert watch["dlq_backlog_max"] == 0 and watch["oldest_dwell_s_max"] < DWELL_LIMIT_S

        # the promoted installation's first message waits ten minutes for Kafka, and the tick sees it
        promoted.mailbox.put(gtdt("CA1234", (1, "A1")))
        ok(run_as(live, "pump", "--drain"))
        with promoted.engine.begin() as conn:
            conn.execute(text(f"UPDATE msg_event SET released_at = now() - interval '{OUTAGE_S} seconds'"))
        promoted.alerter().evaluate()
    finally:
        promoted.dispose()
    code, watch = summary(run_as, live)
    assert code == 1 and watch["state"] == "failed" and watch["oldest_dwell_s_max"] >= OUTAGE_S - 60
    assert any("oldest undelivered event waited" in r for r in watch["reasons"]), watch["reasons"]
    assert sum(h["readings"] for h in watch["hours"]) == 2          # two ticks (in one hour, or two)
    assert max(h["dwell_max_s"] for h in watch["hours"]) >= OUTAGE_S - 60

    with dg.instance_for_test() as instance:
        with dg.build_schedule_context(instance=instance) as ctx:
            assert isinstance(compare_schedule(ctx), dg.RunRequest)   # the hourly report of the window
        result = compare_job.execute_in_process(instance=instance, resources={"msgx": MsgxResource()})
    assert result.success
    (mat,) = [m for m in result.asset_materializations_for_node("compare_op") if m.asset_key == PARALLEL_RUN]
    assert mat.metadata["observation"].value == "failed"
    assert mat.metadata["oldest_event_dwell_s"].value >= OUTAGE_S - 60
    assert "possible until" in mat.metadata["observation_report"].value
