"""monitor_job under Dagster (issue 14 item 4, OPS-2): the health checks run every minute on a
schedule, not only when clicked; each run reports every check as an asset check evaluation and
posts one webhook alert per state change (MSGX_ALERT_WEBHOOK), the alert state persisting across runs."""

from __future__ import annotations

import functools
from collections import Counter

import dagster as dg

from msgx_dagster.checks import dead_letters_check
from msgx_dagster.jobs import monitor as monitor_module
from msgx_dagster.jobs.common import LOOPING_RUN_S, looping_run_config
from msgx_dagster.jobs.monitor import monitor_job
from msgx_dagster.resources import MsgxResource
from msgx_engine.clock import repeat_for
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



def test_p18_a_scheduled_run_evaluates_every_minute_until_it_ends(settings, app, monkeypatch):
    """P18 (OPS-2 kept): a scheduled run (run_for_s LOOPING_RUN_S) evaluates every check each minute,
    not once, so one run start per ten minutes still gives a result a minute; with a dead letter the
    webhook is posted once, not at every evaluation. Fake time: the pauses advance a counter."""
    monkeypatch.setenv("MSGX_DB_URL", settings.db_url)
    monkeypatch.setenv("MSGX_MAILBOX_URL", settings.mailbox_url)
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    monkeypatch.setattr(monitor_module, "repeat_for",
                        functools.partial(repeat_for, sleep=sleep, monotonic=lambda: now[0]))
    make_dead_letter(app)
    with webhook() as hook:
        monkeypatch.setenv("MSGX_ALERT_WEBHOOK", hook.url)
        result = monitor_job.execute_in_process(resources={"msgx": MsgxResource()},
                                                run_config=looping_run_config("monitor_op"))
        assert result.success
        names = [e.asset_check_evaluation_data.check_name
                 for e in result.all_events if e.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION]
        assert now[0] == LOOPING_RUN_S
        assert Counter(names) == dict.fromkeys(EXPECTED, 11)     # at 0, 60, ..., 540 and 595 s
        assert len(hook.posts) == 1 and "dead_letters FAILING" in hook.texts()[0]
