"""monitor_job under Dagster (issue 14 item 4, OPS-2): the health checks run every minute on a
schedule, not only when clicked; each run reports every check as an asset check evaluation and
posts one webhook alert per state change (MSGX_ALERT_WEBHOOK), the alert state persisting across runs."""

from __future__ import annotations

import dagster as dg

from msgx_dagster.checks import dead_letters_check
from msgx_dagster.jobs.monitor import monitor_job
from msgx_dagster.resources import MsgxResource
from tests.http_support import make_dead_letter, webhook

EXPECTED = {"backlog_age_check", "dead_letters_check", "delivery_backlog_check", "backfill_lag_check",
            "projection_drift_check", "unsupported_types_check", "request_timeouts_check"}


def test_monitor_runs_report_every_check_and_alert_once(settings, app, monkeypatch):
    """Two scheduled runs with a dead letter: both report all seven checks (dead_letters failed), the
    webhook gets one alert; the clicked check agrees without posting anything."""
    monkeypatch.setenv("MSGX_DB_URL", settings.db_url)
    monkeypatch.setenv("MSGX_MAILBOX_URL", settings.mailbox_url)
    make_dead_letter(app)
    with webhook() as hook:
        monkeypatch.setenv("MSGX_ALERT_WEBHOOK", hook.url)
        for _ in range(2):
            result = monitor_job.execute_in_process(resources={"msgx": MsgxResource()})
            assert result.success
            evaluations = {e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data
                           for e in result.all_events if e.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION}
            assert set(evaluations) == EXPECTED
            assert not evaluations["dead_letters_check"].passed and evaluations["backlog_age_check"].passed
        assert len(hook.posts) == 1 and "dead_letters FAILING" in hook.texts()[0]
        clicked = dead_letters_check(msgx=MsgxResource())
        assert not clicked.passed and clicked.metadata["dead"].value == 1
        assert len(hook.posts) == 1

