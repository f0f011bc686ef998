"""The health checks' names and limits are written once in the code (``monitor.names``,
``monitor.thresholds``), and everything else agrees with them (OPS-2: every alert and check comes
with an entry point an operator can trust): the Dagster side and ``msgx status`` key on the same
names, the Prometheus rules and the runbook spell only names that exist, and every number the
runbook or a Prometheus rule states about a check equals the value the check compares against."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from msgx_dagster.assets.specs import CHECK_AREAS
from msgx_dagster.checks import CHECK_DEFS, DESCRIPTIONS, description
from msgx_dagster.sensors.health import health_sensor
from msgx_engine.handlers.answers import TIMEOUT_S
from msgx_engine.monitor import names, thresholds
from msgx_engine.monitor.checks import CHECKS, Drift, evaluate
from msgx_engine.monitor.figures import DEAD_LETTERS_LISTED, Figures
from msgx_engine.monitor.status import FIRST_COMMAND, RUNBOOK_SECTIONS

REPO = Path(__file__).resolve().parents[2]
RUNBOOK = (REPO / "docs" / "runbook.md").read_text(encoding="utf-8")
PROMETHEUS = sorted((REPO / "deploy" / "prometheus").glob("*.yml"))
RULES = REPO / "deploy" / "prometheus" / "msgx-rules.yml"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
EMPTY = Figures(now=NOW, open_messages=0, head_id=None, oldest_open_at=None, by_status_reason=[], dead=0,
                backfill_pending=0, oldest_backfill_at=None, unsent_by_topic={}, oldest_unsent_at=None,
                dead_events=0, requests=[], request_outcomes=[], unsupported_recent=[], pump_lock_held=False)


def section(title: str) -> str:
    """The runbook section under ``## title``, up to the next heading of that level."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", RUNBOOK, flags=re.M | re.S)
    assert match, f"runbook section {title!r} is missing"
    return " ".join(match.group(1).split())


WORDS = {"a": 1, "an": 1, "one": 1}
UNITS = {"s": 1, "second": 1, "seconds": 1, "minute": 60, "minutes": 60, "hour": 3600, "hours": 3600}


def seconds_of(phrase: str) -> float:
    """'10 minutes', 'a minute', 'hour', '60 s', '30 seconds' in seconds."""
    parts = phrase.split()
    count = 1 if len(parts) == 1 else WORDS.get(parts[0]) or int(parts[0])
    return float(count * UNITS[parts[-1]])


def stated(title: str, pattern: str) -> float:
    """The duration the runbook's section states where ``pattern``'s group stands."""
    found = re.search(pattern, section(title))
    assert found, f"runbook section {title!r} no longer says {pattern!r}"
    return seconds_of(found.group(1))


DURATION = r"((?:\d+|a|an) (?:s|seconds?|minutes?|hours?)|hour)"


def test_every_check_is_named_by_the_one_definition() -> None:
    """OPS-2: the engine's checks are exactly the named ones, in the named order, each reporting
    under its own name; the Dagster asset checks, their descriptions and health assets, and
    ``msgx status``'s first commands key on the same names."""
    assert tuple(CHECKS) == names.CHECK_NAMES
    results = evaluate(EMPTY, Drift(total=0))
    assert [r.name for r in results] == list(names.CHECK_NAMES)
    assert set(CHECK_DEFS) == set(DESCRIPTIONS) == set(CHECK_AREAS) == set(names.CHECK_NAMES)
    assert set(FIRST_COMMAND) <= set(names.CHECK_NAMES) and set(RUNBOOK_SECTIONS) <= set(names.CHECK_NAMES)


def test_the_names_the_prometheus_rules_and_the_runbook_spell_exist() -> None:
    """OPS-2: every ``check="…"`` in the shipped Prometheus files and every "check `…`" in the
    runbook is a check the code defines, and the runbook names every check."""
    in_rules = {m for path in PROMETHEUS for m in re.findall(r'check="(\w+)"', path.read_text(encoding="utf-8"))}
    in_runbook = set(re.findall(r"check `([a-z_]+)`", RUNBOOK))
    assert in_rules and in_runbook
    assert in_rules - set(names.CHECK_NAMES) == set()
    assert in_runbook - set(names.CHECK_NAMES) == set()
    assert set(names.CHECK_NAMES) - in_runbook == set(), "a check without its runbook section"


@pytest.mark.parametrize("title, pattern, seconds", [
    ("Backlog age", rf"has waited {DURATION} or more", thresholds.HEAD_AGE.seconds),
    ("Delivery backlog", rf"has waited {DURATION} or more", thresholds.UNSENT_AGE.seconds),
    ("Backfill lag", rf"for {DURATION} or more", thresholds.BACKFILL_AGE.seconds),
    ("Unsupported types", rf"In the last {DURATION}", thresholds.UNSUPPORTED_WINDOW.seconds),
    ("Pipeline stalled", rf"for over {DURATION}", thresholds.WORK_GRACE.seconds),
    ("Monitor stale", rf"every {DURATION}", thresholds.HEALTH_INTERVAL.seconds),
    ("Request timeouts", rf"\({DURATION} for a plan", TIMEOUT_S["RQFD"]),
    ("Request timeouts", rf", {DURATION} for a reference table", TIMEOUT_S["RQRD"]),
])
def test_the_runbook_states_the_codes_limits(title: str, pattern: str, seconds: float) -> None:
    """OPS-2: a limit the runbook tells the operator is the limit the check applies."""
    assert stated(title, pattern) == seconds


def test_the_runbook_lists_as_many_dead_letters_as_status_shows() -> None:
    """OPS-2: "the N oldest" dead letters in the runbook are the N ``msgx status`` carries."""
    found = re.search(r"lists the (\d+) oldest", section("Dead letters"))
    assert found and int(found.group(1)) == DEAD_LETTERS_LISTED


@pytest.mark.parametrize("alert, threshold", [
    ("MsgxBacklogAge", thresholds.HEAD_AGE),
    ("MsgxDeliveryBacklog", thresholds.UNSENT_AGE),
    ("MsgxBackfillLag", thresholds.BACKFILL_AGE),
    ("MsgxPumpHeartbeatStale", thresholds.HEARTBEAT_LIMIT),
])
def test_the_prometheus_rules_use_the_codes_limits(alert: str, threshold: thresholds.Threshold) -> None:
    """OPS-2: Prometheus fires at the limit the health check uses, and its text states that limit."""
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    rule = next(r for g in doc["groups"] for r in g["rules"] if r.get("alert") == alert)
    limits = {float(n) for n in re.findall(r"_seconds\s*>=?\s*(\d+)", rule["expr"])}
    assert threshold.seconds in limits, (alert, rule["expr"])
    said = re.search(r"limit (\d+ \w+)", rule["annotations"]["description"])
    assert said is None or seconds_of(said.group(1)) == threshold.seconds


def test_the_operator_prose_is_made_from_the_limits() -> None:
    """OPS-2: the check descriptions and the health sensor's description state the table's values
    (so changing a limit changes the text), and the words read as a person says them."""
    assert [thresholds.spoken(s) for s in (30, 60, 120, 600, 3600, 90)] == [
        "30 seconds", "1 minute", "2 minutes", "10 minutes", "1 hour", "90 seconds"]
    for name, limit in [(names.BACKLOG_AGE, thresholds.HEAD_AGE), (names.DELIVERY_BACKLOG, thresholds.UNSENT_AGE),
                        (names.BACKFILL_LAG, thresholds.BACKFILL_AGE),
                        (names.UNSUPPORTED_TYPES, thresholds.UNSUPPORTED_WINDOW),
                        (names.PIPELINE_LIVENESS, thresholds.WORK_GRACE)]:
        assert re.search(rf"\b{limit.words}\b", description(name)), name
    text = health_sensor.description or ""
    assert thresholds.HEALTH_INTERVAL.words in text and thresholds.HEALTH_REFRESH.words in text
    assert set(thresholds.THRESHOLDS) == {t.name for t in thresholds.THRESHOLDS.values()}
