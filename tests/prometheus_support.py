"""Helpers for the tests of the shipped operations files (``deploy/prometheus``, ``deploy/grafana``):
Debian's ``promtool`` and ``prometheus`` binaries, the rules and the dashboard as data, the metric
names their expressions use, and a real Prometheus server on a free loopback port."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.private_servers import free_port

REPO = Path(__file__).resolve().parent.parent
PROMETHEUS_DIR = REPO / "deploy" / "prometheus"
RULES = PROMETHEUS_DIR / "msgx-rules.yml"
RULE_TESTS = PROMETHEUS_DIR / "msgx-rules.test.yml"
EXAMPLE_CONFIG = PROMETHEUS_DIR / "prometheus.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "msgx-dashboard.json"
RUNBOOK = REPO / "docs" / "runbook.md"
# Stands for where an installation publishes docs/: the runbook links' one install-time value.
DOCS_PLACEHOLDER = "https://msgx-docs.invalid"

METRIC = re.compile(r"\bmsgx_[A-Za-z0-9_]+")
SUFFIXES = ("_bucket", "_sum", "_count", "_total", "_created", "_info")


def tool(name: str) -> str:
    """The path of ``promtool`` / ``prometheus``; a clear failure (never a skip) when missing."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found on PATH: install Debian's prometheus package "
                    "(`apt-get install prometheus`; scripts/test.sh does it when run as root)", pytrace=False)
    return path


def rules() -> list[dict]:
    """Every alerting rule of the shipped rules file, in file order."""
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def dashboard_exprs(doc: dict) -> list[str]:
    """Every PromQL expression of the dashboard's panels (rows included)."""
    exprs: list[str] = []

    def walk(panels: list[dict]) -> None:
        for panel in panels:
            exprs.extend(t["expr"] for t in panel.get("targets", []) if t.get("expr"))
            walk(panel.get("panels", []))

    walk(doc["panels"])
    return exprs


def variable_queries(doc: dict) -> list[str]:
    """The queries of the dashboard's query variables (Grafana's ``label_values(...)``, not PromQL)."""
    queries = []
    for var in doc.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            query = var["query"]
            queries.append(query["query"] if isinstance(query, dict) else query)
    return queries


def metric_names(expr: str) -> set[str]:
    """The msgx metric names an expression reads (Prometheus' own series, like ``up``, are not msgx's)."""
    return set(METRIC.findall(expr))


def exported_names(metrics_text: str) -> set[str]:
    """Family and sample names in one ``/metrics`` answer. The ``# TYPE`` lines name every family
    even when it has no sample yet (a labelled gauge over an empty table)."""
    names: set[str] = set()
    for family in text_string_to_metric_families(metrics_text):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    names.update(re.findall(r"^# TYPE (\S+) ", metrics_text, flags=re.MULTILINE))
    return names


def is_exported(name: str, exported: set[str]) -> bool:
    """A used name counts when it is exported as is, or its family is (``_bucket``/``_sum``/``_count``
    of a histogram, ``_total`` of a counter)."""
    if name in exported:
        return True
    return any(name.endswith(s) and name[: -len(s)] in exported for s in SUFFIXES)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    slug = heading.strip().lower()
    slug = re.sub(r"[^\w\- ]", "", slug)
    return slug.replace(" ", "-")


def runbook_anchors() -> set[str]:
    text = RUNBOOK.read_text()
    return {github_slug(m) for m in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, flags=re.MULTILINE)}


# --- a real Prometheus server ------------------------------------------------------------------------
def api_get(base: str, path: str, timeout: float = 5.0) -> dict:
    """One call of Prometheus' HTTP API; its JSON answer, an error answer (400, 422) included."""
    try:
        with urllib.request.urlopen(base + path, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read())


@contextmanager
def prometheus_server(workdir: Path, scrape_port: int, rules_text: str, *,
                      interval: str = "1s") -> Iterator[str]:
    """Debian's ``prometheus`` with its own config, rules and storage under ``workdir``, listening on a
    free loopback port, scraping ``127.0.0.1:scrape_port`` as job ``msgx`` and evaluating the rules
    every ``interval``. Yields its base URL; stops it at the end."""
    binary = tool("prometheus")
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "msgx-rules.yml").write_text(rules_text)
    (workdir / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
        "rule_files": ["msgx-rules.yml"],
        "scrape_configs": [{"job_name": "msgx", "static_configs": [{"targets": [f"127.0.0.1:{scrape_port}"]}]}],
    }))
    port = free_port()
    log = (workdir / "prometheus.log").open("w")
    proc = subprocess.Popen([binary, f"--config.file={workdir / 'prometheus.yml'}",
                             f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"prometheus exited with {proc.returncode}: {(workdir / 'prometheus.log').read_text()}")
            try:
                with urllib.request.urlopen(base + "/-/ready", timeout=1) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                pytest.fail("prometheus did not become ready within 60 s")
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
