"""``msgx status`` rendering, pure: a hand-built report through the real check
functions, rendered as text and JSON. The text fits the terminal's width in aligned columns, names
warnings apart from failures, gives each failing check its first command and runbook section,
and says the same as the JSON."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta

from msgx_engine.monitor.checks import CheckResult, pipeline_liveness
from msgx_engine.monitor.figures import MailboxSide
from msgx_engine.monitor.status import (
    EXIT_FAILING,
    EXIT_OK,
    Backlog,
    CheckLine,
    Projection,
    Pump,
    StatusReport,
    anchor,
    check_line,
)
from msgx_engine.monitor.status_render import as_json, render_text, verdict
from msgx_engine.store.overview import DeadLetter, SnapshotRun, TopicBacklog
from tests.unit.test_health_checks import HEALTHY

NOW = datetime(2026, 12, 4, 22, 0, tzinfo=UTC)


def report(checks: list[CheckLine], dead: int = 0) -> StatusReport:
    letters = [DeadLetter(100 + i, "FLOP", "GTDT", "exhausted", "INFRA", "OperationalError: " + "x" * 300,
                          NOW - timedelta(minutes=30 - i), NOW - timedelta(minutes=20)) for i in range(min(dead, 20))]
    return StatusReport(
        now=NOW, mode="production", checks=checks,
        backlog=Backlog(3, 1234, 700.0, True, 50, 95.0, False, None, 0, 0.0),
        pump=Pump(False, NOW - timedelta(minutes=14), 840.0, NOW - timedelta(hours=2), "pump-host", 4242),
        dead_letters_waiting=dead, dead_letters=letters,
        outbox=[TopicBacklog("msg", 12, NOW - timedelta(seconds=130), 2)],
        snapshots=[SnapshotRun(date(2026, 12, 5), 77, "DNLD", 3, 241, 241, 0, 0, NOW - timedelta(hours=1), 5)],
        live_since=date(2026, 12, 4), projection=Projection(configured=False, measured=False, differing=None))


def lines_for(results: list[CheckResult], head: int | None = 1234) -> list[CheckLine]:
    return [check_line(r, head) for r in results]


def test_failing_checks_carry_their_first_command_and_runbook_section():
    """FAILING for an error-severity check, WARN for a warning, OK otherwise; a failing check names
    its first command (the head's id filled in) and its runbook section."""
    head, dead, ok = lines_for([
        CheckResult("backlog_age", False, "stuck"), CheckResult("dead_letters", False, "2 wait", warn_only=True),
        CheckResult("pipeline_liveness", True, "fine")])
    assert (head.state, head.first_command, head.runbook) == ("FAILING", "msgx replay --ids 1234",
                                                              "docs/runbook.md#backlog-age")
    assert (dead.state, dead.severity, dead.first_command) == ("WARN", "warn", "msgx replay --status DEAD")
    assert (ok.state, ok.first_command, ok.runbook) == ("OK", None, "docs/runbook.md#pipeline-stalled")
    assert anchor("stand_mapping") == "stand-mapping"


def test_exit_code_and_verdict_name_failures_and_warnings_apart():
    """Exit 1 for any failing check, a warning included; the verdict says which are warnings."""
    healthy = report(lines_for([CheckResult("backlog_age", True, "ok")]))
    assert healthy.exit_code == EXIT_OK and verdict(healthy) == "healthy: all 1 checks pass"
    mixed = report(lines_for([CheckResult("backlog_age", False, "stuck"),
                              CheckResult("dead_letters", False, "2 wait", warn_only=True)]))
    assert mixed.exit_code == EXIT_FAILING
    assert verdict(mixed) == "NOT HEALTHY: 1 failing (backlog_age); 1 warning (dead_letters)"
    warn_only = report(lines_for([CheckResult("dead_letters", False, "2 wait", warn_only=True)]))
    assert warn_only.exit_code == EXIT_FAILING


def test_text_fits_the_width_in_aligned_columns_and_matches_the_json():
    """At 100 columns: every check row and dead-letter row fits, the STATE column starts at the same
    place on every row, a long cause wraps under its own column; the JSON has the same checks,
    counts, dead letters and outbox figures."""
    long_cause = "the queue is stuck behind mailbox id 1234 " * 8
    checks = lines_for([CheckResult("backlog_age", False, long_cause), CheckResult("unsupported_types", True, "none"),
                        CheckResult("dead_letters", False, "20 wait", warn_only=True)])
    r = report(checks, dead=25)
    text = render_text(r, width=100)
    lines = text.splitlines()
    rows = [ln for ln in lines if re.match(r"^  (backlog_age|unsupported_types|dead_letters) ", ln)]
    assert len(rows) == 3 and len({ln.index(s) for ln, s in zip(rows, ("FAILING", "OK", "WARN"), strict=True)}) == 1
    table = lines[lines.index(next(ln for ln in lines if ln.startswith("DEAD LETTERS"))):]
    assert all(len(ln) <= 100 for ln in rows + table[:22]), [ln for ln in rows + table if len(ln) > 100]
    assert "DEAD LETTERS: 25 waiting for an operator (the 20 oldest below)" in text
    assert "first: msgx replay --ids 1234   see docs/runbook.md#backlog-age" in text
    assert re.search(r"^  msg\s+12\s+2 min\s+2$", text, flags=re.M)
    assert "unregistered mailbox rows   50     oldest inserted 95 s ago" in text
    assert "host pump-host, pid 4242" in text and "free: no pump is running" in text

    doc = json.loads(json.dumps(as_json(r)))
    assert [(c["name"], c["state"]) for c in doc["checks"]] == [(c.name, c.state) for c in checks]
    assert doc["dead_letters"]["waiting"] == 25 and len(doc["dead_letters"]["oldest"]) == 20
    assert doc["outbox"] == [{"topic": "msg", "undelivered": 12, "oldest_undelivered_age_s": 130.0, "dead": 2}]
    assert doc["backlog"]["unregistered_rows"] == 50 and doc["pump"]["pid"] == 4242
    assert doc["snapshots"]["days"][0]["differing"] == 5


def test_acknowledge_suggestion_offers_only_what_a_replay_cannot_fix():
    """OPS-2, US-10 AC2: the dead-letter section prints the replayable dead letters (retries ran
    out, row missing) apart, with their replay preview, and offers `msgx acknowledge` only for
    those a replay cannot fix: pasting the printed line never closes a fixable one."""
    def letter(msg_id: int, reason: str) -> DeadLetter:
        return DeadLetter(msg_id, "FLOP", "CNCL", reason, "INFRA", "x", NOW, NOW)

    r = report(lines_for([CheckResult("dead_letters", False, "4 wait", warn_only=True)]))
    r = StatusReport(**{**vars(r), "dead_letters_waiting": 4, "dead_letters": [
        letter(155, "exhausted"), letter(354, "malformed"), letter(400, "missing"), letter(702, "oversize")]})
    text = render_text(r, width=120)
    [ack] = [ln for ln in text.splitlines() if "msgx acknowledge" in ln]
    assert re.findall(r"\d+", ack.split("acknowledge", 1)[1]) == ["354", "702"]
    assert "replayable once the cause is fixed: 155 400" in text
    assert "preview their replay:   msgx replay --ids 155,400" in text
    doc = as_json(r)["dead_letters"]
    assert isinstance(doc, dict)
    assert [(d["msg_id"], d["replayable"]) for d in doc["oldest"]] == [
        (155, True), (354, False), (400, True), (702, False)]

    only_fixable = StatusReport(**{**vars(r), "dead_letters": [letter(155, "exhausted")]})
    assert "msgx acknowledge" not in render_text(only_fixable, width=120)


def test_a_mailbox_outage_names_the_mailbox_section_not_a_stalled_pipeline():
    """OPS-2: when pipeline_liveness fails because the mailbox cannot be read, `msgx status` points
    to the runbook's "Mailbox unreachable" section and its first command (a query of the mailbox),
    not to "Pipeline stalled" and the Dagster sensor list; a real stall keeps its own."""
    down = pipeline_liveness(replace(HEALTHY, mailbox=MailboxSide(False, error="OperationalError: timed out")), None)
    line = check_line(down, 7)
    assert (line.state, line.runbook) == ("FAILING", "docs/runbook.md#mailbox-unreachable")
    assert line.first_command is not None and line.first_command.startswith("mysql -h MAILBOX_HOST")
    assert "FROM cminmsgs" in line.first_command
    stalled = pipeline_liveness(replace(HEALTHY, pump_lock_held=False, heartbeats=[],
                                        mailbox=MailboxSide(True, 5, HEALTHY.now - timedelta(seconds=90))), None)
    assert check_line(stalled, 7).runbook == "docs/runbook.md#pipeline-stalled"
