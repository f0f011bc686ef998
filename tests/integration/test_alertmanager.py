"""The shipped Alertmanager configuration (deploy/alertmanager/alertmanager.yml), checked by Debian's
``amtool`` and run in a real ``prometheus-alertmanager`` on a free loopback port (OPS-2: an alert
reaches the right people, once per outage).

``amtool`` and ``prometheus-alertmanager`` come with Debian's ``prometheus-alertmanager`` package:
without them these tests fail with that instruction, they are never skipped.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from tests.private_servers import ServerProcess, free_port, wait_for
from tests.prometheus_support import rules, tool

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "deploy" / "alertmanager" / "alertmanager.yml"
PAGES = {r["alert"] for r in rules() if r["labels"]["severity"] == "page"}
TICKETS = {r["alert"] for r in rules() if r["labels"]["severity"] == "ticket"}


def amtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("amtool"), *args], cwd=CONFIG.parent, capture_output=True, text=True, timeout=60)


def test_amtool_accepts_the_configuration(tmp_path):
    """`amtool check-config` accepts the file (routes, inhibitions, receivers), and refuses a copy
    that routes to a receiver it does not define, so the check can fail."""
    checked = amtool("check-config", CONFIG.name)
    assert checked.returncode == 0 and "SUCCESS" in checked.stdout, checked.stdout + checked.stderr
    assert "2 inhibit rules" in checked.stdout
    broken = tmp_path / "alertmanager.yml"
    broken.write_text(CONFIG.read_text("utf-8").replace("receiver: msgx-page", "receiver: msgx-pager"), "utf-8")
    assert amtool("check-config", str(broken)).returncode != 0


@pytest.mark.parametrize("severity, receiver",
                         [("page", "msgx-page"), ("ticket", "msgx-ticket"), (None, "msgx-ticket")])
def test_every_shipped_alert_is_routed_by_its_severity(severity, receiver):
    """Each rule's alert reaches the pager when its severity is `page` and the ticket system when it
    is `ticket`; an alert with no severity still reaches someone (the ticket system)."""
    names = {"page": PAGES, "ticket": TICKETS, None: {"SomethingElse"}}[severity]
    assert names
    for name in sorted(names):
        labels = [f"alertname={name}", "job=msgx"] + ([f"severity={severity}"] if severity else [])
        routed = amtool("config", "routes", "test", f"--config.file={CONFIG.name}", *labels)
        assert routed.stdout.strip() == receiver, (name, routed.stdout + routed.stderr)


# --- a real Alertmanager -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory) -> Iterator[str]:
    """The shipped configuration in Debian's Alertmanager on a free loopback port, clustering off."""
    work = tmp_path_factory.mktemp("alertmanager")
    port = free_port()
    server = ServerProcess([tool("prometheus-alertmanager"), f"--config.file={CONFIG}",
                            f"--storage.path={work}", f"--web.listen-address=127.0.0.1:{port}",
                            "--cluster.listen-address="], port)
    server.start(timeout_s=30)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def post_alerts(base: str, *alerts: dict[str, str]) -> None:
    now = datetime.now(UTC).isoformat()
    body = json.dumps([{"labels": labels, "startsAt": now} for labels in alerts]).encode()
    req = urllib.request.Request(f"{base}/api/v2/alerts", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200


def states(base: str) -> dict[tuple[str, str], str]:
    """(alertname, instance) -> active / suppressed, with whatever inhibits it."""
    with urllib.request.urlopen(f"{base}/api/v2/alerts", timeout=10) as resp:
        found = json.loads(resp.read())
    return {(a["labels"]["alertname"], a["labels"]["instance"]):
            a["status"]["state"] + ("/inhibited" if a["status"]["inhibitedBy"] else "") for a in found}


def alert(name: str, instance: str) -> dict[str, str]:
    [rule] = [r for r in rules() if r["alert"] == name]
    return {"alertname": name, "job": "msgx", "instance": instance, **rule["labels"]}


def test_a_mailbox_or_database_outage_pages_once(alertmanager):
    """One hung mailbox used to page twice. With the outage's own alert firing, the heartbeat, stalled
    and backlog alerts it causes are muted (inhibited) on the same msgx serve, while the same alerts
    of another instance that still reads its databases, and alerts the outage does not cause
    (dead letters), stay active. A database outage mutes the delivery backlog and the monitor too."""
    caused_by_mailbox = ("MsgxPumpHeartbeatStale", "MsgxPipelineStalled", "MsgxBacklogAge", "MsgxBackfillLag")
    caused_by_database = (*caused_by_mailbox, "MsgxDeliveryBacklog", "MsgxMonitorStale")
    post_alerts(alertmanager, alert("MsgxMailboxUnreachable", "a:8080"),
                *(alert(name, "a:8080") for name in (*caused_by_mailbox, "MsgxDeadLetters")),
                alert("MsgxPumpHeartbeatStale", "b:8080"),
                alert("MsgxDatabaseUnreachable", "c:8080"), *(alert(name, "c:8080") for name in caused_by_database))
    expected = {("MsgxMailboxUnreachable", "a:8080"): "active", ("MsgxDeadLetters", "a:8080"): "active",
                ("MsgxPumpHeartbeatStale", "b:8080"): "active", ("MsgxDatabaseUnreachable", "c:8080"): "active",
                **{(name, "a:8080"): "suppressed/inhibited" for name in caused_by_mailbox},
                **{(name, "c:8080"): "suppressed/inhibited" for name in caused_by_database}}
    seen: dict[tuple[str, str], str] = {}

    def settled() -> bool:
        seen.update(states(alertmanager))
        return seen == expected

    try:
        wait_for(settled, "the caused alerts are inhibited", timeout=30)
    except AssertionError:
        pytest.fail(f"{seen} != {expected}")


def test_inhibition_names_alerts_the_rules_raise():
    """Every alert name the inhibitions match is one of the shipped rules, so a renamed rule cannot
    silently leave an outage paging twice."""
    config = yaml.safe_load(CONFIG.read_text("utf-8"))
    names = set()
    for rule in config["inhibit_rules"]:
        for matcher in rule["source_matchers"] + rule["target_matchers"]:
            names.update(matcher.split("=", 1)[1].lstrip("~").strip('"').split("|"))
    assert names <= PAGES | TICKETS and {"MsgxMailboxUnreachable", "MsgxDatabaseUnreachable"} <= names
