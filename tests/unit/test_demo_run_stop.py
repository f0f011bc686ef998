"""The demo's Ctrl-C terminates each run only once its worker is past its start: an interrupt that
reaches a worker still starting is raised by Dagster at the op's first boundary, before msgx's own
handler (``stops_when_terminated``) is in place, and prints a stack trace (US-02: Ctrl-C stops
everything in a few lines). A fake GraphQL answer stands in for the webserver (pure unit test)."""

from __future__ import annotations

import time
from typing import Any

from msgx_engine.demo import webserver
from msgx_engine.demo.webserver import START_GRACE_S, Run, Webserver


def test_a_run_is_interruptible_when_queued_or_started_past_the_grace():
    now = 1000.0
    assert Run("q", "pump_job", "QUEUED").interruptible(now)
    assert not Run("s", "request_tracking_job", "STARTING").interruptible(now)
    assert not Run("n", "request_tracking_job", "NOT_STARTED").interruptible(now)
    assert not Run("y", "request_tracking_job", "STARTED", now - START_GRACE_S / 2).interruptible(now)
    assert Run("o", "pump_job", "STARTED", now - START_GRACE_S).interruptible(now)


class FakeWebserver(Webserver):
    """Answers as a webserver would while one run starts: STARTING for two polls, then STARTED
    (just now), then ended once terminated."""

    def __init__(self) -> None:
        super().__init__(port=1)
        self.polls = 0
        self.terminated_at_poll: dict[str, int] = {}

    def _post(self, query: str, variables: Any) -> dict[str, Any]:
        if "terminateRuns" in query:
            for run_id in variables["runIds"]:
                self.terminated_at_poll.setdefault(run_id, self.polls)
            return {"terminateRuns": {"terminateRunResults": [{"__typename": "TerminateRunSuccess"}]}}
        self.polls += 1
        if "r1" in self.terminated_at_poll:
            return {"runsOrError": {"__typename": "Runs", "results": []}}
        status, started = ("STARTING", None) if self.polls <= 2 else ("STARTED", time.time() - START_GRACE_S)
        return {"runsOrError": {"__typename": "Runs", "results": [
            {"runId": "r1", "jobName": "request_tracking_job", "status": status, "startTime": started}]}}


def test_terminate_all_waits_for_a_starting_run_before_interrupting_it(monkeypatch):
    monkeypatch.setattr(webserver, "POLL_S", 0.0)
    web = FakeWebserver()
    asked, left = web.terminate_all(deadline_s=10.0)
    assert [r.run_id for r in asked] == ["r1"] and left == []
    assert web.terminated_at_poll == {"r1": 3}     # not at the two polls that saw it starting
