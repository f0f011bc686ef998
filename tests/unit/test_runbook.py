"""The runbook (docs/runbook.md) against what points into it and what it tells an
operator to run: every section an alert rule, a check description or ``msgx status`` links to
exists (headings parsed into GitHub's anchors), every ``msgx`` command it shows parses with the
real CLI parser, and every Dagster job and sensor it names is one the code location defines.
OPS-2: alerts come with a handling entry point."""

from __future__ import annotations

import importlib
import os
import re
import shlex
from pathlib import Path

import pytest

from msgx_engine.cli import main as cli
from msgx_engine.monitor.checks import CHECKS
from msgx_engine.monitor.status import RUNBOOK, anchor

REPO = Path(__file__).resolve().parents[2]
RUNBOOK_TEXT = (REPO / RUNBOOK).read_text(encoding="utf-8")

# the sections every alert rule and check may point to (the operators' contract)
REQUIRED = ("backlog-age", "dead-letters", "delivery-backlog", "backfill-lag", "projection-drift",
            "unsupported-types", "request-timeouts", "stand-mapping", "pipeline-stalled", "monitor-stale",
            "database-unreachable", "mailbox-unreachable", "pump-down", "daemon-down", "kafka-down", "redis-down",
            "database-restored", "reaching-the-databases")
# words that must not reach an operator: internal requirement, decision and issue ids
INTERNAL_ID = re.compile(r"\b(?:OPS|US|FS|INV|CLM|DESIGN)-?\d|\b[DPOMEF]\d{1,2}\b|\bissue \d+|§")


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    body = re.sub(r"```.*?```", "", markdown, flags=re.S)
    return {github_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", body, flags=re.M)}


def code_blocks(markdown: str) -> list[str]:
    return [line.strip() for block in re.findall(r"```[^\n]*\n(.*?)```", markdown, flags=re.S)
            for line in block.splitlines() if line.strip() and not line.strip().startswith("#")]


def inline_code(markdown: str) -> list[str]:
    body = re.sub(r"```.*?```", "", markdown, flags=re.S)
    return [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", body)]


def msgx_argv(command: str) -> list[str] | None:
    """The arguments of a ``msgx`` command line (``VAR=value`` prefixes and the program's path
    dropped), or None for any other program."""
    words = shlex.split(command)
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        words.pop(0)
    if not words or Path(words[0]).name != "msgx":
        return None
    return words[1:]


def test_the_runbook_has_every_section_alerts_and_checks_point_to():
    """OPS-2: each alert and each health check has its section, by the anchor it links to."""
    have = anchors(RUNBOOK_TEXT)
    missing = [a for a in REQUIRED if a not in have]
    assert not missing, f"runbook sections missing: {missing}"
    for name in CHECKS:
        assert anchor(name) in have, f"check {name} links to #{anchor(name)}, which the runbook lacks"
    assert "pipeline-stalled" == anchor("pipeline_liveness")


def test_every_runbook_link_in_the_repository_resolves():
    """Alert rules (runbook_url), check descriptions, docs: every ``runbook.md#…`` and every
    same-file ``(#…)`` link names a section that exists."""
    have = anchors(RUNBOOK_TEXT)
    linked: dict[str, set[str]] = {}
    for folder in ("msgx_engine", "msgx_dagster", "deploy", "docs"):
        for path in (REPO / folder).rglob("*"):
            if path.suffix in (".py", ".yml", ".yaml", ".md", ".json") and path.is_file():
                for m in re.finditer(r"runbook\.md#([\w-]+)", path.read_text(encoding="utf-8", errors="replace")):
                    linked.setdefault(m.group(1), set()).add(str(path.relative_to(REPO)))
    for m in re.finditer(r"\]\(#([\w-]+)\)", RUNBOOK_TEXT):
        linked.setdefault(m.group(1), set()).add(RUNBOOK)
    assert any(RUNBOOK != f for files in linked.values() for f in files), "nothing links to the runbook"
    broken = {a: sorted(files) for a, files in linked.items() if a not in have}
    assert not broken, f"links to runbook sections that do not exist: {broken}"


@pytest.fixture(scope="module")
def dagster_defs():
    """The code location's definitions, loaded with placeholder URLs (loading connects to nothing)."""
    with pytest.MonkeyPatch.context() as mp:
        for key in [k for k in os.environ if k.startswith("MSGX_")]:
            mp.delenv(key)
        mp.setenv("MSGX_DB_URL", "postgresql+psycopg://postgres@127.0.0.1:1/none")
        mp.setenv("MSGX_MAILBOX_URL", "mysql+pymysql://root@127.0.0.1:1/none")
        return importlib.import_module("msgx_dagster.definitions").defs


def test_check_descriptions_in_dagster_point_to_runbook_sections(dagster_defs):
    """Every Dagster health check's description names an existing runbook section."""
    have = anchors(RUNBOOK_TEXT)
    checks = [spec for checks_def in dagster_defs.asset_checks or () for spec in checks_def.check_specs]
    assert checks
    for spec in checks:
        found = re.findall(r"runbook\.md#([\w-]+)", spec.description or "")
        assert all(a in have for a in found), (spec.name, found)


def test_every_msgx_command_in_the_runbook_parses():
    """Each ``msgx …`` command the runbook shows, in code blocks and inline, is accepted by the CLI's
    own parser (sub-command and options), so an operator never copies a command that does not exist."""
    parser = cli.parser()
    commands = [c for c in code_blocks(RUNBOOK_TEXT) + inline_code(RUNBOOK_TEXT) if msgx_argv(c)]   # not bare `msgx`
    subcommands = {(msgx_argv(c) or [""])[0] for c in commands}
    assert {"status", "replay", "acknowledge", "outbox", "dispatch", "recover", "skip", "pump"} <= subcommands
    for command in commands:
        argv = msgx_argv(command)
        assert argv is not None
        try:
            parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"the runbook shows a command the CLI refuses: {command}")


def test_every_dagster_job_and_sensor_the_runbook_names_exists(dagster_defs):
    """``dagster job execute … -j NAME`` and ``dagster sensor start|stop NAME`` name definitions of
    the code location."""
    text = " ".join(code_blocks(RUNBOOK_TEXT) + inline_code(RUNBOOK_TEXT))
    jobs = set(re.findall(r"-j (\w+)", text))
    sensors = set(re.findall(r"dagster sensor (?:start|stop) (?:-[mw] \S+ )?(\w+)", text))
    sensors |= set(re.findall(r"`(\w+_sensor)`", RUNBOOK_TEXT))
    assert "projection_rebuild_job" in jobs and {"inbox_sensor", "health_sensor"} <= sensors
    for job in jobs:
        assert dagster_defs.resolve_job_def(job).name == job
    for sensor in sensors:
        assert dagster_defs.resolve_sensor_def(sensor).name == sensor


def test_the_runbook_speaks_the_operators_language():
    """Operator-facing text carries no internal requirement, decision or issue ids."""
    found = INTERNAL_ID.findall(RUNBOOK_TEXT)
    assert not found, f"internal ids in the runbook: {found}"


def test_dagster_commands_are_in_their_production_form_listed_once_before_you_start():
    """OPS-2 (docs/deployment.md): every `dagster` command the runbook tells an operator to run uses
    the production workspace (`-w /etc/msgx/workspace.yaml`), not the slow development form that
    loads msgx's code (`-m msgx_dagster.definitions`), and "Before you start" lists each of them once,
    with the helpers that run it as msgx's user with its settings and instance."""
    before, _, body = RUNBOOK_TEXT.partition("## Start here: msgx status")
    start = before[before.index("**Before you start.**"):]
    helpers = code_blocks(start)
    assert any(line.startswith("as_msgx() { systemd-run --uid=msgx") and "EnvironmentFile=/etc/msgx/msgx.env" in line
               and "DAGSTER_HOME=" in line for line in helpers)
    def shape(command: str) -> str:
        return " ".join(w for w in command.split()[:3])
    listed = [c for c in helpers if c.startswith("dagster ")]
    assert len({shape(c) for c in listed}) == len(listed), "a dagster command is listed twice"
    used = [c for c in code_blocks(body) + inline_code(body) if c.startswith("dagster ")]
    assert used
    for command in used:
        assert "-m msgx_dagster.definitions" not in command, command
        assert "-w /etc/msgx/workspace.yaml" in command or command.startswith("dagster run "), command
        assert shape(command) in {shape(c) for c in listed}, f"not listed in Before you start: {command}"
