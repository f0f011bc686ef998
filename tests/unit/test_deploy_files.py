"""The deployment files checked offline: the settings template against what msgx reads, the image's
Dockerfile with a Dockerfile linter (hadolint, installed by the test extra), and the Helm values
against the chart's own schema (vendored in deploy/helm). No server, no Docker, no helm binary.
The systemd units are checked in tests/integration/test_systemd_units.py."""

from __future__ import annotations

import ast
import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from msgx_engine.config import Settings

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
TEMPLATE = DEPLOY / "msgx.env.example"
DOCKERFILE = DEPLOY / "Dockerfile"

# Read by the fault-injection hooks of the crash tests only: never set in an installation.
TEST_ONLY = {"MSGX_FAULT_STEP", "MSGX_FAULT_HOLD"}
SETTING = re.compile(r"^#? ?((?:MSGX|DAGSTER_PG)_[A-Z0-9_]+)=(.*)$", re.M)


def settings_msgx_reads() -> set[str]:
    """Every MSGX_ variable name spelled out as a string in msgx's code (config.py's settings, the
    compare job's, the log level): the names an installation may set."""
    names = set()
    for package in ("msgx_engine", "msgx_dagster"):
        for source in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(source.read_text("utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                        and re.fullmatch(r"MSGX_[A-Z0-9_]+", node.value):
                    names.add(node.value)
    return names - TEST_ONLY


def dagster_instance_variables() -> set[str]:
    """The environment variables deploy/dagster.yaml reads (``env:`` entries)."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if set(node) == {"env"}:
                found.add(node["env"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(yaml.safe_load((DEPLOY / "dagster.yaml").read_text("utf-8")))
    return found


def template_entries() -> dict[str, tuple[str, bool]]:
    """name -> (value shown, set in the template) for every setting line, on or commented out."""
    text = TEMPLATE.read_text("utf-8")
    return {m.group(1): (m.group(2), not m.group(0).startswith("#")) for m in SETTING.finditer(text)}


def test_env_template_lists_every_setting_and_nothing_else():
    """OPS-1: deploy/msgx.env.example names every MSGX_ variable msgx reads and every DAGSTER_PG_
    variable of deploy/dagster.yaml, and no variable that nothing reads, so the template cannot
    drift from the code."""
    config_names = {node.value for node in ast.walk(ast.parse((REPO / "msgx_engine/config.py").read_text("utf-8")))
                    if isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and re.fullmatch(r"MSGX_[A-Z0-9_]+", node.value)}
    read = settings_msgx_reads() | dagster_instance_variables()
    assert config_names <= read and {"DAGSTER_PG_HOST", "DAGSTER_PG_PASSWORD"} <= read
    listed = set(template_entries())
    assert sorted(read - listed) == [], "settings msgx reads that deploy/msgx.env.example does not list"
    assert sorted(listed - read) == [], "deploy/msgx.env.example lists variables nothing reads"


def test_env_template_defaults_are_msgx_defaults(monkeypatch):
    """OPS-1: every default the template shows (its commented-out lines) is a value msgx accepts,
    and is msgx's real default: settings from the template's defaults equal settings from nothing."""
    for name in settings_msgx_reads():
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MSGX_DB_URL", "postgresql+psycopg://msgx@db/msgx")
    monkeypatch.setenv("MSGX_MAILBOX_URL", "mysql+pymysql://msgx@mailbox/aodbinterface")
    bare = Settings.from_env()
    shown = {name: value for name, (value, on) in template_entries().items()
             if not on and name.startswith("MSGX_") and name != "MSGX_HOME"}
    assert {"MSGX_GAP_GRACE_S", "MSGX_KAFKA_COMPRESSION", "MSGX_ARCHIVE_AFTER"} <= set(shown)
    for name, value in shown.items():
        monkeypatch.setenv(name, value)
    assert Settings.from_env() == bare


def test_env_template_holds_no_real_secret():
    """OPS-2: the template's secrets are placeholders (CHANGE-ME), so a copy that was not filled in
    cannot reach a server, and nothing real is committed."""
    entries = template_entries()
    for name in ("MSGX_API_TOKEN", "DAGSTER_PG_PASSWORD"):
        assert entries[name][0] == "CHANGE-ME"
    for name in ("MSGX_DB_URL", "MSGX_MAILBOX_URL"):
        assert ":CHANGE-ME@" in entries[name][0]


def hadolint() -> str:
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert found, "hadolint is missing: install the test extra (pip install -e .[test])"
    return found


def lint(dockerfile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([hadolint(), "--no-color", str(dockerfile)], capture_output=True, text=True, timeout=60)


def test_dockerfile_passes_hadolint(tmp_path):
    """OPS-2: deploy/Dockerfile has no finding of hadolint at any level (a pragma names each rule it
    waives, with the reason beside it); the linter does flag a careless Dockerfile."""
    result = lint(DOCKERFILE)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")
    careless = tmp_path / "Dockerfile"
    careless.write_text("FROM python\nRUN apt-get install curl\n")
    flagged = lint(careless)
    assert flagged.returncode != 0 and "DL3006" in flagged.stdout


def test_image_runs_as_an_unprivileged_user_and_holds_no_secret():
    """OPS-2: the image is python:3.11-slim-based, ends as a numeric non-root user (Kubernetes can
    check runAsNonRoot), sets no msgx setting (secrets come at run time), and its build context
    leaves out the virtualenv, the Git history and the filled-in settings file."""
    text = DOCKERFILE.read_text("utf-8")
    froms = re.findall(r"^FROM (\S+)", text, re.M)
    assert froms and all(image.startswith("python:3.11-slim") for image in froms)
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users and re.fullmatch(r"[1-9]\d*:[1-9]\d*", users[-1])
    assert not re.search(r"(MSGX_(?!HOME)[A-Z_]+|DAGSTER_PG_[A-Z]+)", text)
    ignored = (REPO / ".dockerignore").read_text("utf-8").split()
    assert {".git", ".venv", "deploy/*.env"} <= set(ignored)


# --- Helm values -----------------------------------------------------------------------------

HELM = DEPLOY / "helm"
REMOTE = "https://"


def offline_schema(node: Any, *, under_then: bool = False) -> Any:
    """The chart's schema made checkable here for a values *override*:

    - a ``$ref`` to a Kubernetes schema on the web is dropped (no network here; the Kubernetes
      object shapes are Kubernetes' to check) and its siblings stay;
    - ``required`` is dropped except inside a conditional's ``then``: Helm checks the override
      merged with the chart's defaults, which fill every other required key;
    - an object whose keys the chart names (and that refers to nothing remote) refuses other keys:
      the chart's templates read only the keys they name, so another key is always a mistake.
    """
    if isinstance(node, list):
        return [offline_schema(item, under_then=under_then) for item in node]
    if not isinstance(node, dict):
        return node
    remote = str(node.get("$ref", "")).startswith(REMOTE)
    out = {}
    for key, value in node.items():
        if key == "$ref" and remote:
            continue
        if key == "required" and isinstance(value, list) and not under_then:
            continue
        out[key] = offline_schema(value, under_then=under_then or key == "then")
    if out.get("properties") and "additionalProperties" not in out and not remote:
        out["additionalProperties"] = False
    return out


@pytest.fixture(scope="module")
def chart_validator() -> jsonschema.Draft7Validator:
    schema = offline_schema(json.loads((HELM / "values.schema.json").read_text("utf-8")))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


@pytest.fixture(scope="module")
def values() -> dict[str, Any]:
    return yaml.safe_load((HELM / "values.yaml").read_text("utf-8"))


def test_helm_values_follow_the_charts_schema(chart_validator, values):
    """OPS-1: deploy/helm/values.yaml is valid for Dagster's Helm chart by the chart's own schema
    (every key one the chart knows, every value of the right kind), and the schema does refuse a
    misspelt key and a wrong value."""
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in chart_validator.iter_errors(values)]
    assert errors == []
    typo = copy.deepcopy(values)
    typo["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]["tagConcurencyLimits"] = []
    assert not chart_validator.is_valid(typo)
    wrong = copy.deepcopy(values)
    wrong["runLauncher"]["type"] = "K8sLauncher"
    assert not chart_validator.is_valid(wrong)
    assert not chart_validator.is_valid({**values, "dagsterWebServer": {"enableReadOnly": True}})


def test_helm_values_keep_msgxs_instance_rules(values):
    """PRE-5, OPS-1: on Kubernetes as on one host, runs are queued with one run at a time per
    `singleton` tag value (the very limit of deploy/dagster.yaml), run monitoring fails a run whose
    worker died instead of resuming it, Dagster's storage is the external PostgreSQL, the code server
    is msgx's image serving msgx_dagster.definitions as the image's user, and a read-only webserver
    is deployed for viewers."""
    instance = yaml.safe_load((DEPLOY / "dagster.yaml").read_text("utf-8"))
    coordinator = values["dagsterDaemon"]["runCoordinator"]
    assert coordinator["enabled"] and coordinator["type"] == "QueuedRunCoordinator"
    helm_limits = coordinator["config"]["queuedRunCoordinator"]["tagConcurrencyLimits"]
    assert helm_limits == instance["concurrency"]["runs"]["tag_concurrency_limits"]
    monitoring = values["dagsterDaemon"]["runMonitoring"]
    assert monitoring["enabled"] and monitoring["maxResumeRunAttempts"] == 0
    assert values["postgresql"]["enabled"] is False and values["generatePostgresqlPasswordSecret"] is False
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    args = deployment["codeServerArgs"]
    assert args[args.index("--module-name") + 1] == "msgx_dagster.definitions"
    user = re.findall(r"^USER (\d+):", DOCKERFILE.read_text("utf-8"), re.M)[-1]
    assert deployment["podSecurityContext"]["runAsUser"] == int(user)
    assert values["dagsterWebserver"]["enableReadOnly"] is True
    assert values["postgresql"]["postgresqlPassword"] == ""      # the password is in the secret alone
