"""The production topology's files (deploy/compose.yaml, deploy/workspace.yaml, deploy/dagster.yaml)
checked offline, and the pure parts of the run coordinator, the inbox sensor's orphan rule and the
looping runs' one.
tests/e2e/test_topology.py runs the same commands as processes."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import jsonschema
import psutil
import pytest
import yaml

from msgx_dagster.jobs.common import LOOPING_RUN_S
from msgx_dagster.orphans import BEAT_S, STALE_S, LoopSighting, Worker, looping_run_dead, worker_alive
from msgx_dagster.run_coordinator import UNAUTHENTICATED, AttributingRunCoordinator, launched_by
from msgx_dagster.run_limits import limits_singleton
from msgx_dagster.schedules import LOOPING_MAX_RUNTIME_TAG
from msgx_dagster.sensors.inbox import CONFIRM_S, Cursor, Sighting, judge
from msgx_engine.cli import main as cli

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
COMPOSE = yaml.safe_load((DEPLOY / "compose.yaml").read_text("utf-8"))
SERVICES = COMPOSE["services"]
ORPHAN_BOUND_S = 120    # a dead worker's job can start its next run within two minutes


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_compose_file_follows_the_compose_specification():
    """deploy/compose.yaml validates against the Compose Specification's JSON schema (vendored in
    tests/data/compose-spec), so `docker compose` accepts its shape without a Docker daemon here."""
    schema = json.loads((REPO / "tests" / "data" / "compose-spec" / "compose-spec.json").read_text("utf-8"))
    jsonschema.Draft7Validator(schema).validate(COMPOSE)
    with pytest.raises(jsonschema.ValidationError):       # the schema does refuse a wrong shape
        jsonschema.Draft7Validator(schema).validate({"services": {"api": {"ports": "8080"}}})


def test_every_service_runs_the_one_image_with_the_same_environment():
    """One image built from deploy/Dockerfile; every service reads msgx.env, has DAGSTER_HOME and
    the instance and workspace of this folder."""
    assert set(SERVICES) == {"codeserver", "daemon", "webserver-operators", "webserver-viewers", "api"}
    for name, service in SERVICES.items():
        assert service["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}, name
        assert service["image"] == "msgx:latest" and service["env_file"] == "msgx.env", name
        home = service["environment"]["DAGSTER_HOME"]
        assert f"./dagster.yaml:{home}/dagster.yaml:ro" in service["volumes"], name


def test_both_webservers_are_published_on_loopback_only_and_viewers_are_read_only():
    """OPS-2: the operators' and the viewers' UI are reachable on the host's loopback alone (the
    authenticating proxy sits there: read-only still shows every run's logs); the viewers' UI runs
    --read-only; the API binds publicly only with its token."""
    for name in ("webserver-operators", "webserver-viewers"):
        assert SERVICES[name]["ports"] and all(p.startswith("127.0.0.1:") for p in SERVICES[name]["ports"]), name
    assert "--read-only" in SERVICES["webserver-viewers"]["command"]
    assert "--read-only" not in SERVICES["webserver-operators"]["command"]
    assert all(p.startswith("127.0.0.1:") for p in SERVICES["api"]["ports"])
    serve = cli.parser().parse_args(SERVICES["api"]["command"][1:])
    assert serve.allow_public and serve.behind_tls_proxy and serve.port == 8080


def test_workspace_loads_msgx_from_the_code_server_of_the_compose_file():
    """The webservers and the daemon load the code location over gRPC from service `codeserver` at
    the port its command serves on, under the location name it announces."""
    workspace = yaml.safe_load((DEPLOY / "workspace.yaml").read_text("utf-8"))
    [entry] = workspace["load_from"]
    server = entry["grpc_server"]
    code = SERVICES["codeserver"]["command"]
    assert code[:3] == ["python", "-m", "msgx_dagster.code_server"]     # dagster code-server start (T6)
    assert server["host"] == "codeserver" and str(server["port"]) == option(code, "--port")
    assert server["location_name"] == option(code, "--location-name")
    for name in ("daemon", "webserver-operators", "webserver-viewers"):
        assert option(SERVICES[name]["command"], "--workspace") == "/etc/msgx/workspace.yaml", name


def test_every_process_reads_the_runs_logs_from_one_folder():
    """OPS-2: the instance keeps the runs' captured output in one absolute folder; in compose every
    service mounts the same named volume there (each container has a filesystem of its own), and on
    one host every systemd unit has it as a state directory, so every webserver reads what the code
    server's run workers wrote. tests/e2e/test_topology.py reads a run's ALERT line through a
    webserver that shares no other folder with the code server."""
    logs = yaml.safe_load((DEPLOY / "dagster.yaml").read_text("utf-8"))["compute_logs"]
    assert logs["class"] == "LocalComputeLogManager"
    folder = logs["config"]["base_dir"]
    assert folder.startswith("/")
    for name, service in SERVICES.items():
        mounts = [v.split(":") for v in service["volumes"]]
        assert [m[0] for m in mounts if m[1] == folder] == ["compute-logs"], name
    assert "compute-logs" in COMPOSE["volumes"]
    common = (DEPLOY / "systemd" / "msgx-.service.d" / "10-common.conf").read_text("utf-8")
    [dirs] = [line.split("=", 1)[1].split() for line in common.splitlines() if line.startswith("StateDirectory=")]
    assert folder.removeprefix("/var/lib/") in dirs
    dockerfile = (DEPLOY / "Dockerfile").read_text("utf-8")
    assert f"install -d -o msgx -g msgx -m 0750 {folder}" in dockerfile


@pytest.fixture(scope="module")
def deploy_instance(tmp_path_factory):
    """deploy/dagster.yaml without its PostgreSQL storage (so no server is needed), as an instance."""
    config = yaml.safe_load((DEPLOY / "dagster.yaml").read_text("utf-8"))
    del config["storage"]
    home = tmp_path_factory.mktemp("dagster_home")
    (home / "dagster.yaml").write_text(yaml.safe_dump(config), "utf-8")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        yield instance


def test_deploy_instance_limits_every_job_monitors_runs_and_never_retries(deploy_instance, monkeypatch):
    """OPS-1, T5: every job of the code location carries a `singleton` tag the instance limits to one
    run; run monitoring is on (no resume: the default launcher cannot) and fails a run stuck starting
    or canceling in time for the next run to start within two minutes; no automatic run retries;
    the queue is msgx's coordinator reading the proxy's X-Forwarded-User."""
    for key in [k for k in os.environ if k.startswith("MSGX_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("MSGX_DB_URL", "postgresql+psycopg://postgres@127.0.0.1:1/none")
    monkeypatch.setenv("MSGX_MAILBOX_URL", "mysql+pymysql://root@127.0.0.1:1/none")
    defs = importlib.import_module("msgx_dagster.definitions").defs
    jobs = [j for j in defs.resolve_all_job_defs() if not j.name.startswith("__")]
    assert len(jobs) > 10
    unlimited = [j.name for j in jobs if not limits_singleton(deploy_instance, j.tags)]
    assert not unlimited
    # every job's run may be in progress at once: no job waits for a slot another job holds
    assert deploy_instance.get_concurrency_config().run_queue_config.max_concurrent_runs > len(jobs)
    assert deploy_instance.run_monitoring_enabled
    assert deploy_instance.run_monitoring_max_resume_run_attempts == 0
    # a run stuck starting (no worker yet: run monitoring's case) is failed, with one look's delay,
    # in time for the next run of its job to start within two minutes of the fault (T5)
    look = deploy_instance.run_monitoring_poll_interval_seconds
    assert deploy_instance.run_monitoring_start_timeout_seconds + look <= ORPHAN_BOUND_S - 10
    assert deploy_instance.run_monitoring_cancel_timeout_seconds + look <= ORPHAN_BOUND_S - 10
    assert type(deploy_instance.run_launcher) is dg.DefaultRunLauncher      # run_worker_sensor's premise
    assert not deploy_instance.run_retries_enabled
    coordinator = deploy_instance.run_coordinator
    assert isinstance(coordinator, AttributingRunCoordinator) and coordinator.user_header == "X-Forwarded-User"


@pytest.mark.parametrize("tags, header, expected", [
    ({}, "alice", "alice"),
    ({"msgx/launched_by": "mallory"}, " bob ", "bob"),
    ({"dagster/sensor_name": "inbox_sensor"}, None, "sensor:inbox_sensor"),
    ({"dagster/schedule_name": "dispatch_schedule"}, None, "schedule:dispatch_schedule"),
    ({"msgx/launched_by": "mallory"}, None, UNAUTHENTICATED),
    ({}, "  ", UNAUTHENTICATED),
])
def test_launched_by_trusts_only_the_proxy_header_and_the_daemon(tags, header, expected):
    """OPS-2: the tag names the proxy's user, else the daemon's sensor or schedule, else says
    unauthenticated; a tag the client set itself never survives."""
    assert launched_by(tags, header) == expected


def test_orphan_rule_needs_two_lockless_sightings_confirm_s_apart_or_a_gone_process():
    """OPS-1: a STARTED pump run without the writer lock is suspected first and failed only when it
    is still without it CONFIRM_S later; any sighting with the lock (or within the start-up grace)
    clears the suspicion; another run is a new suspect. A pump whose process is provably gone is
    failed at once. The run-key serial survives throughout."""
    dead, live = Sighting(alive=False), Sighting(alive=True)
    cursor, orphaned = judge(Cursor(7), "r1", dead, now=100.0)
    assert not orphaned and cursor == Cursor(7, "r1", 100.0)
    assert judge(cursor, "r1", dead, now=100.0 + CONFIRM_S - 1) == (cursor, False)
    assert judge(cursor, "r1", dead, now=100.0 + CONFIRM_S)[1]
    assert judge(cursor, "r1", live, now=200.0) == (Cursor(7), False)
    assert judge(cursor, "r2", dead, now=200.0) == (Cursor(7, "r2", 200.0), False)
    assert judge(Cursor(7), "r1", Sighting(alive=False, gone=True), now=1.0) == (Cursor(7), True)
    assert judge(Cursor(7), "r1", Sighting(alive=True, gone=True), now=1.0) == (Cursor(7), False)


def test_cursor_reads_its_own_form_and_the_bare_serial_before_it():
    assert Cursor.parse(None) == Cursor() and Cursor.parse("41") == Cursor(41)
    assert Cursor.parse(Cursor(3, "r", 1.5).dump()) == Cursor(3, "r", 1.5)


def test_looping_run_rule_fails_a_gone_or_silent_run_and_spares_a_beating_or_young_one():
    """OPS-1: a STARTED looping run (request tracking) is dead when the process its own heartbeat
    names is gone, when that heartbeat is older than STALE_S, or when it has not beaten once in
    STALE_S since it started; a run beating within the bound, or younger than it, lives."""
    assert looping_run_dead(LoopSighting(run_age_s=5, beat_age_s=1, gone=True)) == "its process has ended"
    assert looping_run_dead(LoopSighting(run_age_s=500, beat_age_s=STALE_S)) is None
    assert "heartbeat is 61 s old" in (looping_run_dead(LoopSighting(run_age_s=500, beat_age_s=STALE_S + 1)) or "")
    assert looping_run_dead(LoopSighting(run_age_s=STALE_S, beat_age_s=None)) is None
    assert "not reported once" in (looping_run_dead(LoopSighting(run_age_s=STALE_S + 1, beat_age_s=None)) or "")
    assert looping_run_dead(LoopSighting(run_age_s=500, beat_age_s=30), stale_s=20) is not None


def test_looping_runs_are_replaced_within_two_minute_ticks_and_never_cut_while_healthy():
    """OPS-1/P18: the bound leaves six ten-second beats of slack and, with a tick a minute, an
    orphaned run is replaced within two minutes; run monitoring's maximum runtime on the looping
    runs is past a whole healthy run (the slow backstop only)."""
    assert STALE_S >= 5 * BEAT_S and STALE_S + 60 <= 120
    assert LOOPING_RUN_S + 120 < int(LOOPING_MAX_RUNTIME_TAG["dagster/max_runtime"]) <= 900


def test_a_run_worker_is_the_process_dagster_recorded_while_it_runs():
    """OPS-1, T5: the pid in a run's "Started process" event names its worker while a process with
    that pid runs and started before the event; a process that has ended, a zombie, and a later
    process reusing the pid are not the worker."""
    me = psutil.Process()
    assert worker_alive(Worker(me.pid, said_at=time.time()))
    assert not worker_alive(Worker(me.pid, said_at=me.create_time() - 60))      # the pid, reused later
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    assert not worker_alive(Worker(ended.pid, said_at=time.time()))
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 30
        while psutil.Process(zombie.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not worker_alive(Worker(zombie.pid, said_at=time.time()))
    finally:
        zombie.wait()
