"""Dagster instances (DESIGN §5, OPS-1): the production instance `deploy/dagster.yaml` keeps runs in
PostgreSQL from environment variables with the same run limits as the demo's, and the pump says
in its log when the instance it runs in has no `singleton` run limit."""

from __future__ import annotations

import logging
import shutil
import uuid
from pathlib import Path
from urllib.parse import urlparse

import dagster as dg
import psycopg
import pytest
import yaml
from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage

from msgx_dagster.jobs.pump import pump_job
from msgx_dagster.resources import MsgxResource
from msgx_dagster.run_limits import limits_singleton
from msgx_engine.demo.instance import RUN_LIMITS, instance_yaml
from tests.builders import gtdt
from tests.conftest import PG_ADMIN

REPO = Path(__file__).resolve().parents[2]
NO_LIMIT = "has no run limit on the tag singleton='pump'"


@pytest.fixture
def msgx_env(settings, monkeypatch):
    monkeypatch.setenv("MSGX_DB_URL", settings.db_url)
    monkeypatch.setenv("MSGX_MAILBOX_URL", settings.mailbox_url)
    return settings


def _warnings(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    return [e.user_message for e in instance.all_logs(run_id) if e.level == logging.WARNING]


def test_pump_warns_in_an_instance_without_the_singleton_limit(msgx_env, app):
    """OPS-1, DESIGN §5: an instance with no `singleton` run limit (here an ephemeral one, as
    `execute_in_process` or a bare `dagster dev` gets) makes the pump log a WARNING naming the
    missing limit and the advisory lock that still guards; the run still drains and succeeds."""
    app.mailbox.put(gtdt("W1", (1, "A1")))
    with dg.DagsterInstance.ephemeral() as instance:
        assert not limits_singleton(instance, pump_job.tags)
        result = pump_job.execute_in_process(instance=instance, resources={"msgx": MsgxResource()})
        assert result.success
        warned = [w for w in _warnings(instance, result.run_id) if NO_LIMIT in w]
    assert len(warned) == 1 and "advisory lock" in warned[0] and "deploy/dagster.yaml" in warned[0]


def test_pump_is_quiet_in_an_instance_with_the_singleton_limit(msgx_env, app, tmp_path):
    """The same run in an instance carrying the run limits of deploy/dagster.yaml logs no such
    warning (so the warning means something when it appears)."""
    app.mailbox.put(gtdt("W2", (1, "A1")))
    (tmp_path / "dagster.yaml").write_text(RUN_LIMITS, "utf-8")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert limits_singleton(instance, pump_job.tags)
        result = pump_job.execute_in_process(instance=instance, resources={"msgx": MsgxResource()})
        assert result.success
        assert not [w for w in _warnings(instance, result.run_id) if NO_LIMIT in w]


@pytest.mark.parametrize("limits, expected", [
    ([{"key": "singleton", "value": {"applyLimitPerUniqueValue": True}, "limit": 1}], True),
    ([{"key": "singleton", "value": "pump", "limit": 1}], True),
    ([{"key": "singleton", "limit": 1}], True),
    ([{"key": "singleton", "value": "dispatch", "limit": 1}], False),
    ([{"key": "singleton", "value": {"applyLimitPerUniqueValue": True}, "limit": 2}], False),
    ([{"key": "team", "value": {"applyLimitPerUniqueValue": True}, "limit": 1}], False),
])
def test_which_limits_count_as_a_singleton_limit(tmp_path, limits, expected):
    """A limit of 1 on key `singleton` that covers this run's value (per unique value, this
    value, or every value) counts; another value, a higher limit or another key does not."""
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump({"concurrency": {"runs": {
        "tag_concurrency_limits": limits}}}), "utf-8")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert limits_singleton(instance, {"singleton": "pump"}) is expected


@pytest.fixture
def dagster_pg(monkeypatch) -> str:
    """A throwaway database for a production-style Dagster instance, reached through the
    DAGSTER_PG_* variables deploy/dagster.yaml reads."""
    name = f"msgx_dagster_{uuid.uuid4().hex[:8]}"
    admin = urlparse(PG_ADMIN)
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    for var, value in (("HOST", admin.hostname), ("PORT", str(admin.port or 5432)), ("USERNAME", admin.username),
                       ("PASSWORD", admin.password or ""), ("DB", name)):
        monkeypatch.setenv(f"DAGSTER_PG_{var}", value or "")
    yield admin._replace(path=f"/{name}").geturl()
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_deploy_instance_keeps_runs_in_postgres_from_the_environment(dagster_pg, tmp_path):
    """DESIGN §4/§5: deploy/dagster.yaml (DAGSTER_HOME pointed at a folder holding it) stores runs,
    event logs and schedules in the PostgreSQL named by DAGSTER_PG_*, queues runs, and limits each
    `singleton` value to one run; a run created there is read back from PostgreSQL."""
    shutil.copy(REPO / "deploy" / "dagster.yaml", tmp_path / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
        assert isinstance(instance.schedule_storage, PostgresScheduleStorage)
        assert isinstance(instance.run_coordinator, dg.QueuedRunCoordinator)
        assert limits_singleton(instance, pump_job.tags)
        run = instance.create_run_for_job(pump_job, tags=pump_job.tags)
    with psycopg.connect(dagster_pg) as conn:
        stored = conn.execute("SELECT run_id FROM runs").fetchall()
    assert [r[0] for r in stored] == [run.run_id]


def test_demo_and_deploy_instances_set_the_same_run_limits():
    """One run-limit policy: the instance `msgx demo` writes and deploy/dagster.yaml carry the same
    run coordinator and concurrency blocks."""
    deploy = yaml.safe_load((REPO / "deploy" / "dagster.yaml").read_text("utf-8"))
    demo = yaml.safe_load(instance_yaml("postgresql+psycopg2://postgres@/dagster?host=/s&port=5432"))
    for key in ("run_coordinator", "concurrency"):
        assert deploy[key] == demo[key], key
    assert deploy["concurrency"]["runs"]["tag_concurrency_limits"][0]["key"] == "singleton"
    assert "postgres_db" in deploy["storage"]["postgres"] and "postgres_url" in demo["storage"]["postgres"]
