"""A real Prometheus server (Debian's package) scraping a real ``msgx serve`` with the shipped alert
rules: faults made on real databases raise the shipped alerts (OPS-2: fault injection triggers real
alerts).

Prometheus runs with its own config and storage under the test's temporary folder, on a free loopback
port, scraping and evaluating every second. Its copy of ``deploy/prometheus/msgx-rules.yml`` differs
only in the ``for:`` durations, cut to a few seconds so the test takes seconds, not minutes; the rules
with their real durations are covered by ``promtool test rules`` (tests/unit/test_prometheus_rules.py).
Everything else (expressions, labels, texts) is the shipped file as is.
"""

from __future__ import annotations

import re
import subprocess
import time
import urllib.parse
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from msgx_engine.mailbox.adapter import Mailbox
from tests.builders import envelope
from tests.conftest import MSGX_BIN
from tests.http_support import serve_process
from tests.prometheus_support import RULES, api_get, dashboard, dashboard_exprs, prometheus_server, rules

FOR_S = 5          # the test copy's `for:` of every rule


def _short_for(text: str) -> str:
    shortened, count = re.subn(r"(?m)^(\s+for:\s*)\S+\s*$", rf"\g<1>{FOR_S}s", text)
    assert count == len(rules())
    return shortened


def _states(base: str, alert: str) -> set[str]:
    alerts = api_get(base, "/api/v1/alerts")["data"]["alerts"]
    return {a["state"] for a in alerts if a["labels"]["alertname"] == alert}


def _firing_alert(base: str, alert: str) -> dict:
    return next(a for a in api_get(base, "/api/v1/alerts")["data"]["alerts"]
                if a["labels"]["alertname"] == alert and a["state"] == "firing")


def wait_pending_then_firing(base: str, alert: str, deadline_s: float = 120.0) -> list[str]:
    """Poll the alerts API until ``alert`` fires; return the states seen in order (no repeats). With
    a rule evaluated every second and held `for:` 5 s, an alert stays pending for about 5 s, so
    polling every 0.2 s sees it."""
    seen: list[str] = []
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        states = _states(base, alert)
        state = "firing" if "firing" in states else "pending" if "pending" in states else "inactive"
        if not seen or seen[-1] != state:
            seen.append(state)
        if state == "firing":
            return seen
        time.sleep(0.2)
    pytest.fail(f"{alert} did not fire within {deadline_s:.0f} s; states seen: {seen}")


def wait_for_scrape(base: str, query: str, deadline_s: float = 60.0) -> float:
    """Poll an instant query until it returns a sample; its value."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        result = api_get(base, "/api/v1/query?query=" + urllib.parse.quote(query))["data"]["result"]
        if result:
            return float(result[0]["value"][1])
        time.sleep(0.2)
    pytest.fail(f"Prometheus has no sample for {query} within {deadline_s:.0f} s")


def test_stalled_pump_and_dead_letter_raise_the_shipped_alerts(settings, env_for, tmp_path: Path) -> None:
    """OPS-2 fault injection: a malformed message processed by one `msgx pump --drain` ends DEAD and
    `MsgxDeadLetters` goes pending, then firing; rows then put into the mailbox with no pump running
    make `MsgxPipelineStalled` go pending, then firing. The rows carry a receive time three minutes
    back (as if the AODB wrote them while the pump was down), so msgx's own minute of grace before it
    calls the pipeline stalled has passed and the test need not wait it out. With no health-check
    evaluation ever recorded, `MsgxMonitorStale` fires too. Read back through Prometheus' HTTP API;
    the firing alerts carry their runbook link. Every rule evaluates without error, and every dashboard
    expression is accepted by this Prometheus (valid PromQL)."""
    env = env_for()
    mailbox = Mailbox(settings.mailbox_url)
    try:
        with serve_process(env) as (port, _serve), \
                prometheus_server(tmp_path / "prometheus", port, _short_for(RULES.read_text())) as base:
            assert wait_for_scrape(base, 'up{job="msgx"}') == 1.0
            assert wait_for_scrape(base, "msgx_database_up") == 1.0
            assert _states(base, "MsgxDeadLetters") == set()

            for expr in dashboard_exprs(dashboard()):
                answer = api_get(base, "/api/v1/query?query=" + urllib.parse.quote(expr.replace("$instance", ".*")))
                assert answer["status"] == "success", (expr, answer)

            # a dead letter: one malformed message, processed by one drain
            # (watched while the drain runs, so no state can pass unseen however long it lingers)
            mailbox.put("<MSG><META>")
            drain = subprocess.Popen([MSGX_BIN, "pump", "--drain"], env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
            try:
                assert wait_pending_then_firing(base, "MsgxDeadLetters") == ["inactive", "pending", "firing"]
            finally:
                _, err = drain.communicate(timeout=120)
            assert drain.returncode == 0, err
            dead = _firing_alert(base, "MsgxDeadLetters")
            assert dead["labels"]["severity"] == "ticket"
            assert dead["annotations"]["runbook_url"] == "https://msgx-docs.invalid/runbook.md#dead-letters"
            assert "1 message(s) ended DEAD" in dead["annotations"]["description"]

            groups = api_get(base, "/api/v1/rules")["data"]["groups"]
            loaded = {r["name"]: r for g in groups for r in g["rules"]}
            assert set(loaded) == {r["alert"] for r in rules()}
            assert {name: r["health"] for name, r in loaded.items() if r["health"] != "ok"} == {}

            # a stalled pipeline: rows the AODB wrote three minutes ago, and no pump
            assert _states(base, "MsgxPipelineStalled") == set()
            written = datetime.now() - timedelta(minutes=3)
            for _ in range(5):
                mailbox.put(envelope("ZZZZ", "XXXX", "\t<X/>\n"), received_at=written)
            assert wait_pending_then_firing(base, "MsgxPipelineStalled")[-2:] == ["pending", "firing"]
            stalled = _firing_alert(base, "MsgxPipelineStalled")
            assert stalled["labels"]["severity"] == "page"
            assert stalled["annotations"]["runbook_url"] == "https://msgx-docs.invalid/runbook.md#pipeline-stalled"
            assert "5 mailbox row(s) and 0 registered message(s) wait" in stalled["annotations"]["description"]

            # no health-check evaluation ever ran here: the monitor's absence is itself an alert
            if "firing" not in _states(base, "MsgxMonitorStale"):
                wait_pending_then_firing(base, "MsgxMonitorStale")
            monitor = _firing_alert(base, "MsgxMonitorStale")
            assert "health checks is missing" in monitor["annotations"]["description"]
    finally:
        mailbox.dispose()
