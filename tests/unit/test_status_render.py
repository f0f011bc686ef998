"""``msgx status`` rendering, pure: a hand-built report through the real check
functions, rendered as text and JSON. The text fits the terminal's width in aligned columns, names
warnings apart from failures, gives each failing check its first command and runbook section,
and says the same as the JSON."""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime, timedelta

from msgx_engine.monitor.checks import CheckResult
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
