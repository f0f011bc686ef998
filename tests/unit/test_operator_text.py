"""Operator-facing text speaks the operator's language (OPS-2): the README, the operations guide,
the runbook, every CLI help screen and every health check's description name causes and commands,
never the internal requirement, decision, tracker or work-log ids the design documents use."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from msgx_engine.cli import main as cli

ROOT = Path(__file__).resolve().parents[2]
OPERATOR_DOCS = ["README.md", "docs/operations.md", "docs/runbook.md", "docs/deployment.md"]

# requirement ids (OPS-2, US-10 AC4, INV-3, C-15, PRE-1, FS §7), decision ids (D26, P35, O9, M4, L1, F2),
# tracker issues and work-log sessions, and the design document's sections
INTERNAL_ID = re.compile(
    r"\b(?:OPS|US|INV|PRE|NFR|C)-\d+\b|\bFS §|\bDESIGN §|\b[ADEFGLMOPQ]\d{1,2}\b(?![.\d])"
    r"|\bissue \d+|\bsession \d+", re.IGNORECASE)
ALLOWED = {"p50", "p99", "p90", "p95"}       # latency percentiles are the operator's words


def internal_ids(text: str) -> list[str]:
    return [m.group(0) for m in INTERNAL_ID.finditer(text) if m.group(0).lower() not in ALLOWED]


def help_screens(parser: argparse.ArgumentParser) -> list[str]:
    screens = [parser.format_help()]
    for action in parser._actions:                                   # argparse has no public walk
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                screens.extend(help_screens(sub))
    return screens


def test_the_pattern_catches_what_it_must_and_spares_percentiles() -> None:
    assert internal_ids("see D26 and OPS-2, US-10 AC4, decisions P35, issue 16, session 35") == [
        "D26", "OPS-2", "US-10", "P35", "issue 16", "session 35"]
    assert internal_ids("p99 ≤ 300 ms, p50 34 ms, 2.5 s, ABDG, msgx_dead_letters") == []


@pytest.mark.parametrize("doc", OPERATOR_DOCS)
def test_operator_docs_cite_no_internal_ids(doc: str) -> None:
    text = (ROOT / doc).read_text(encoding="utf-8")
    assert internal_ids(text) == [], f"{doc} cites internal ids; say what they mean instead"


def test_cli_help_cites_no_internal_ids() -> None:
    found = [i for screen in help_screens(cli.parser()) for i in internal_ids(screen)]
    assert found == []


def test_health_check_descriptions_cite_no_internal_ids() -> None:
    from msgx_dagster.checks import CHECKS

    found = {spec.name: internal_ids(spec.description or "") for c in CHECKS for spec in c.check_specs}
    assert {k: v for k, v in found.items() if v} == {}


# msgx's own tables: an operator reading a job or a help screen is told what they hold, not their names
def internal_tables() -> set[str]:
    import sqlalchemy

    from msgx_engine.store import tables

    return {t.name for t in vars(tables).values() if isinstance(t, sqlalchemy.Table)}


def table_names() -> re.Pattern[str]:
    """Any of msgx's own table names, as a whole word."""
    return re.compile(r"\b(?:" + "|".join(sorted(internal_tables(), key=len, reverse=True)) + r")\b")


def dagster_texts() -> dict[str, str]:
    """Every description the Dagster UI shows: jobs and their ops, schedules, sensors, assets, checks."""
    import importlib
    import pkgutil

    import dagster as dg

    import msgx_dagster.jobs
    from msgx_dagster.assets.specs import ASSET_SPECS, HEALTH_SPECS
    from msgx_dagster.checks import CHECKS
    from msgx_dagster.schedules import schedules_for
    from msgx_dagster.sensors import SENSORS

    texts: dict[str, str] = {}
    modules = [importlib.import_module(f"msgx_dagster.jobs.{m.name}")
               for m in pkgutil.iter_modules(msgx_dagster.jobs.__path__)]
    jobs = {j.name: j for module in modules for value in vars(module).values()
            for j in (value if isinstance(value, list) else [value]) if isinstance(j, dg.JobDefinition)}
    assert "pump_job" in jobs and "acknowledge_job" in jobs
    for job in jobs.values():
        texts[f"job {job.name}"] = job.description or ""
        texts.update({f"op {node.name}": node.description or "" for node in job.graph.node_defs})
    texts.update({f"schedule {s.name}": s.description or "" for s in schedules_for(shadow=False)})
    texts.update({f"sensor {s.name}": s.description or "" for s in SENSORS})
    texts.update({f"asset {a.key.to_user_string()}": a.description or "" for a in [*ASSET_SPECS, *HEALTH_SPECS]})
    texts.update({f"check {spec.name}": spec.description or "" for c in CHECKS for spec in c.check_specs})
    return texts


def test_dagster_descriptions_are_in_the_operators_words() -> None:
    """OPS-2: every job, op, schedule, sensor, asset and check in the Dagster UI has a description,
    citing no internal id and naming none of msgx's own tables."""
    texts = dagster_texts()
    assert len(texts) > 40
    tables = table_names()
    assert [k for k, v in texts.items() if not v.strip()] == []
    assert {k: internal_ids(v) for k, v in texts.items() if internal_ids(v)} == {}
    assert {k: tables.findall(v) for k, v in texts.items() if tables.search(v)} == {}


def test_cli_help_names_no_internal_table_and_explains_every_argument() -> None:
    """OPS-2: no help screen names one of msgx's own tables, and every argument says what it is."""
    tables = table_names()
    assert [m.group(0) for screen in help_screens(cli.parser()) for m in tables.finditer(screen)] == []

    def unexplained(parser: argparse.ArgumentParser, name: str) -> list[str]:
        found = []
        for action in parser._actions:                               # argparse has no public walk
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub in action.choices.items():
                    found += unexplained(sub, f"{name} {sub_name}")
            elif not action.help:
                found.append(f"{name} {action.option_strings or action.dest}")
        return found

    assert unexplained(cli.parser(), "msgx") == []
