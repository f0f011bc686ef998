"""The shipped Prometheus alert rules (``deploy/prometheus``), checked and unit-tested by Debian's
``promtool`` on synthetic series (OPS-2: every health check has an alert an operator can act on).

``promtool`` must be installed (``apt-get install prometheus``; ``scripts/test.sh`` installs it when
missing): without it these tests fail with that instruction, they are never skipped.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace

import pytest
import yaml

from msgx_engine.monitor.checks import MAX_BACKFILL_AGE_S, MAX_HEAD_AGE_S, MAX_UNSENT_AGE_S, Drift, evaluate
from msgx_engine.monitor.figures import MailboxSide
from msgx_engine.store.bridges import MappingStatus
from tests.prometheus_support import (
    DOCS_PLACEHOLDER,
    EXAMPLE_CONFIG,
    PROMETHEUS_DIR,
    RULE_TESTS,
    RULES,
    RUNBOOK,
    rules,
    runbook_anchors,
    tool,
)
from tests.unit.test_health_checks import HEALTHY, ago

# One rule per health check (the check names of msgx_engine/monitor/checks.py), plus the liveness
# rules that no check covers on its own.
EXPECTED = {
    "MsgxBacklogAge": "backlog-age", "MsgxDeadLetters": "dead-letters", "MsgxDeliveryBacklog": "delivery-backlog",
    "MsgxBackfillLag": "backfill-lag", "MsgxProjectionDrift": "projection-drift",
    "MsgxUnsupportedTypes": "unsupported-types", "MsgxRequestTimeouts": "request-timeouts",
    "MsgxStandMapping": "stand-mapping", "MsgxPipelineStalled": "pipeline-stalled",
    "MsgxPumpHeartbeatStale": "pump-down", "MsgxMonitorStale": "monitor-stale",
    "MsgxDatabaseUnreachable": "database-unreachable", "MsgxMailboxUnreachable": "mailbox-unreachable",
}
# Internal requirement and decision ids have no place in text an operator reads.
INTERNAL_ID = re.compile(r"\b(?:[A-Z]{1,3}-\d+|[DPOMFC]\d{1,3}|INV-\d+\w*)\b|\b(?i:issue) \d+")


def _promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([tool("promtool"), *args], cwd=PROMETHEUS_DIR, capture_output=True, text=True,
                          timeout=120)


def test_promtool_checks_the_rules_and_the_example_config() -> None:
    """`promtool check rules` accepts the rules file (valid PromQL, templates that parse) and
    `promtool check config` the example configuration that loads it."""
    checked = _promtool("check", "rules", RULES.name)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(EXPECTED)} rules found" in checked.stdout
    config = _promtool("check", "config", EXAMPLE_CONFIG.name)
    assert config.returncode == 0, config.stdout + config.stderr


def test_promtool_unit_tests_of_every_rule_pass() -> None:
    """OPS-2: `promtool test rules` runs the synthetic-series tests shipped beside the rules (each rule
    firing with its full labels and texts, and not firing below its threshold or before its `for:`)."""
    result = _promtool("test", "rules", RULE_TESTS.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_rule_is_shown_firing_and_quiet_by_the_unit_tests() -> None:
    """The unit-test file proves each rule both ways: at least one evaluation expects the alert and at
    least one expects none, so a rule that always or never fires cannot pass unnoticed."""
    doc = yaml.safe_load(RULE_TESTS.read_text())
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in doc["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert firing == set(EXPECTED), set(EXPECTED) ^ firing
    assert quiet == set(EXPECTED), set(EXPECTED) ^ quiet


def test_each_rule_has_severity_texts_and_its_runbook_section() -> None:
    """OPS-2 handling entry point: every alert carries a severity (page or ticket), a summary and a
    description in operator words without internal ids, and a runbook link to its own section."""
    found = {rule["alert"]: rule for rule in rules()}
    assert set(found) == set(EXPECTED)
    for name, rule in found.items():
        assert rule["labels"]["severity"] in {"page", "ticket"}, name
        notes = rule["annotations"]
        assert notes["runbook_url"] == f"{DOCS_PLACEHOLDER}/runbook.md#{EXPECTED[name]}", name
        for key in ("summary", "description"):
            assert notes[key].strip(), (name, key)
            assert not INTERNAL_ID.search(notes[key]), (name, key, INTERNAL_ID.search(notes[key]))
        assert "msgx status" in notes["description"], name


def test_the_documented_install_line_makes_every_runbook_link_absolute(tmp_path) -> None:
    """The install step of deploy/prometheus/README.md, run as written with one value for where the
    docs are published, turns every `runbook_url` into an absolute link to the alert's runbook
    section under that address; nothing of the placeholder is left, and promtool accepts the result."""
    readme = (PROMETHEUS_DIR / "README.md").read_text("utf-8")
    section = readme[readme.index("## Runbook links"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the README's install step is missing"
    script = block.group(1).replace("/etc/prometheus/", f"{tmp_path}/")
    assert "/etc/" not in script
    done = subprocess.run(["bash", "-euc", script], cwd=PROMETHEUS_DIR, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    docs = re.search(r"^DOCS=(\S+)$", script, re.M)
    assert docs and docs.group(1).startswith("https://")
    installed = tmp_path / RULES.name
    text = installed.read_text("utf-8")
    assert DOCS_PLACEHOLDER not in text
    urls = {r["alert"]: r["annotations"]["runbook_url"]
            for g in yaml.safe_load(text)["groups"] for r in g["rules"]}
    assert urls == {name: f"{docs.group(1)}/runbook.md#{anchor}" for name, anchor in EXPECTED.items()}
    checked = _promtool("check", "rules", str(installed))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_runbook_has_a_section_for_every_rule() -> None:
    """Each `runbook_url` anchor is a heading of docs/runbook.md (GitHub's anchor of the heading)."""
    assert RUNBOOK.exists(), "docs/runbook.md is missing"
    missing = {name: anchor for name, anchor in EXPECTED.items() if anchor not in runbook_anchors()}
    assert not missing, missing


@pytest.mark.parametrize("name, expr", [
    ("dead letters on the raw figure", "msgx_dead_letters"),
    ("stalled pump on the raw figure", "msgx_pipeline_stalled"),
    ("monitor staleness from the last evaluation time", "msgx_monitor_last_evaluation_timestamp_seconds"),
    ("database unreachable also when msgx cannot be scraped", 'up{job="msgx"}'),
])
def test_faults_are_detected_by_prometheus_alone(name: str, expr: str) -> None:
    """The rules read the raw figures msgx exports, not only the monitor's verdicts, so Prometheus
    detects these faults even while the Dagster daemon (which runs the health checks) is down."""
    assert any(expr in rule["expr"] for rule in rules()), name


# The health check each rule alerts on, and a change of a healthy snapshot that fails it.
RULE_CHECKS = {
    "MsgxBacklogAge": ("backlog_age", {"oldest_open_at": ago(MAX_HEAD_AGE_S + 1)}),
    "MsgxDeadLetters": ("dead_letters", {"dead": 1}),
    "MsgxDeliveryBacklog": ("delivery_backlog", {"oldest_unsent_at": ago(MAX_UNSENT_AGE_S + 1)}),
    "MsgxBackfillLag": ("backfill_lag", {"oldest_backfill_at": ago(MAX_BACKFILL_AGE_S + 1)}),
    "MsgxUnsupportedTypes": ("unsupported_types", {"unsupported_recent": [("ZZZZ-XXXX", 2)]}),
    "MsgxRequestTimeouts": ("request_timeouts", {"request_outcomes": [("RQFD", "NONE", "TIMEOUT", 5)]}),
    "MsgxStandMapping": ("stand_mapping", {"stand_mapping": MappingStatus(False, 2)}),
    "MsgxPipelineStalled": ("pipeline_liveness", {"pump_lock_held": False, "heartbeats": [],
                                                  "mailbox": MailboxSide(True, 5, ago(90))}),
}


@pytest.mark.parametrize("alert", sorted(RULE_CHECKS))
def test_a_rule_pages_only_where_its_check_is_an_error(alert: str) -> None:
    """OPS-2: the alert and the health check an operator reads in `msgx status` and the Dagster UI
    agree on how bad the same state is: a check that is a warning (an operator's to-do, WARN) has a
    `ticket` rule; a `page` rule's check fails as an error (FAILING). The delivery backlog paged
    while its check said WARN."""
    name, change = RULE_CHECKS[alert]
    [result] = [r for r in evaluate(replace(HEALTHY, **change), Drift(total=0)) if r.name == name]
    assert not result.passed, result.summary
    severity = {rule["alert"]: rule["labels"]["severity"] for rule in rules()}[alert]
    if severity == "page":
        assert not result.warn_only, f"{alert} pages while {name} is only a warning"
    if result.warn_only:
        assert severity == "ticket", f"{name} is a warning while {alert} pages"
