"""The production topology as plain processes, for the tests that run it (OPS-1, OPS-2): the code
server, the daemon and the webservers started with the commands of deploy/compose.yaml (only host,
port and the workspace path rewritten for loopback and free ports), the instance deploy/dagster.yaml
(Dagster's storage in a throwaway PostgreSQL database, the runs' log folder in the test's temporary
folder) and deploy/workspace.yaml (pointed at the code server's port). As in compose, where each
container has a filesystem of its own, each process runs in a working directory and DAGSTER_HOME of
its own, with only the runs' log folder in common (compose's shared volume).
tests/e2e/test_topology.py, test_run_orphans.py and test_standby.py use it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

import dagster as dg
import psutil
import psycopg
import pytest
import yaml
from sqlalchemy import Connection, text

from msgx_dagster.jobs.requests import HEARTBEAT, request_tracking_job
from msgx_dagster.orphans import owned
from msgx_engine.db import make_engine
from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.store import locks, monitoring
from tests.builders import gtdt
from tests.conftest import KAFKA_BOOTSTRAP, PG_ADMIN, read_topic
from tests.private_servers import free_port

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
COMPOSE = yaml.safe_load((REPO / "deploy" / "compose.yaml").read_text("utf-8"))
DAGSTER_SERVICES = ("codeserver", "daemon", "webserver-operators", "webserver-viewers")
START_DEADLINE_S = 300.0         # cold starts of four Dagster processes on a busy 2-core machine
BACK_WITHIN_S = 60.0             # the requirement: a dead pump is running again within a minute
TRACKING_BACK_WITHIN_S = 150.0   # a dead request-tracking run: the code server back, a minute tick, a run start
T = TypeVar("T")


def local_command(command: list[str], port: int, workspace: Path) -> list[str]:
    """A compose service's command for this machine: the venv's executable, loopback, ``port``, the
    test's workspace file. Nothing else changes."""
    argv = [str(BIN / command[0]), *command[1:]]
    for flag, value in (("--host", "127.0.0.1"), ("--port", str(port)), ("--workspace", str(workspace))):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
    return argv


@dataclass
class Topology:
    home: Path
    env: dict[str, str]
    ports: dict[str, int]
    workspace: Path
    state_url: str
    mailbox_url: str
    topic: str
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    sent: list[int] = field(default_factory=list)        # every mailbox id the tests put

    def start(self, service: str, *, sigint_ignored: bool = False, env: dict[str, str] | None = None) -> None:
        """Start a service with its compose command; ``sigint_ignored``: as a non-interactive shell
        starts a command in the background (``… &`` in a script), with SIGINT ignored; ``env``: more
        of its environment (a preloaded library, for one)."""
        argv = local_command(COMPOSE["services"][service]["command"], self.ports[service], self.workspace)
        own = self.home / service          # its own folder (working directory and DAGSTER_HOME), as a container has
        own.mkdir(exist_ok=True)
        shutil.copy(self.home / "dagster.yaml", own / "dagster.yaml")
        log = (self.home / f"{service}.log").open("ab")
        ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None
        self.procs[service] = subprocess.Popen(argv, env={**self.env, **(env or {}), "DAGSTER_HOME": str(own)}, cwd=own,
                                               stdout=log, stderr=subprocess.STDOUT,
                                               start_new_session=True, preexec_fn=ignore)

    def tree(self, service: str) -> list[psutil.Process]:
        """A service's process and every process under it."""
        top = psutil.Process(self.procs[service].pid)
        return [top, *top.children(recursive=True)]

    def kill_tree(self, service: str) -> list[int]:
        """SIGKILL a service and every process under it (what a container's end does); their pids."""
        proc = self.procs[service]
        tree = self.tree(service)
        for p in tree:
            p.kill()
        psutil.wait_procs(tree, timeout=10)
        proc.wait(10)
        return [p.pid for p in tree]

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n" + p.read_text("utf-8", "replace")[-3000:]
                         for p in sorted(self.home.glob("*.log")))

    def wait(self, what: str, probe: Callable[[], T | None], deadline_s: float) -> T:
        """Poll ``probe`` until it returns something truthy; fail (with the processes' logs) at the deadline."""
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    pytest.fail(f"{name} exited with {proc.returncode} while waiting for {what}\n{self.logs()}")
            value = probe()
            if value:
                return value
            time.sleep(0.5)
        pytest.fail(f"not within {deadline_s:.0f} s: {what}\n{self.logs()}")

    # --- what the test looks at --------------------------------------------------------------
    def instance(self) -> dg.DagsterInstance:
        return dg.DagsterInstance.from_config(str(self.home))

    def pump_runs(self, *statuses: dg.DagsterRunStatus) -> list[dg.DagsterRun]:
        with self.instance() as instance:
            return instance.get_runs(dg.RunsFilter(job_name="pump_job", statuses=list(statuses)))

    @contextmanager
    def state(self) -> Iterator[Connection]:
        """One connection to msgx's state database (no pool, disposed after)."""
        engine = make_engine(self.state_url, single=True)
        try:
            with engine.connect() as conn:
                yield conn
        finally:
            engine.dispose()

    def pump_lock_held(self) -> bool:
        with self.state() as conn:
            return monitoring.advisory_lock_held(conn, locks.PUMP)

    def running_pump(self) -> str | None:
        """The run id of the pump run that is STARTED and whose pump holds the writer lock."""
        started = self.pump_runs(dg.DagsterRunStatus.STARTED)
        return started[0].run_id if len(started) == 1 and self.pump_lock_held() else None

    def pump_pid(self) -> int:
        with self.state() as conn:
            beat = next(b for b in monitoring.heartbeats(conn) if b.component == monitoring.PUMP)
        assert beat.pid is not None
        return beat.pid

    def tracking_run(self) -> tuple[str, int] | None:
        """The STARTED request-tracking run and the pid its own heartbeat names, once it has beaten."""
        with self.instance() as instance:
            records = instance.get_run_records(dg.RunsFilter(job_name=request_tracking_job.name,
                                                             statuses=[dg.DagsterRunStatus.STARTED]))
        if len(records) != 1 or records[0].start_time is None:
            return None
        with self.state() as conn:
            beat = next((b for b in monitoring.heartbeats(conn) if b.component == HEARTBEAT), None)
        if beat is None or beat.pid is None or not owned(beat, records[0].start_time):
            return None
        return records[0].dagster_run.run_id, beat.pid

    def run_status(self, run_id: str) -> dg.DagsterRunStatus:
        with self.instance() as instance:
            run = instance.get_run_by_id(run_id)
            assert run is not None
            return run.status

    def graphql(self, service: str, query: str, variables: dict | None = None,
                headers: dict[str, str] | None = None) -> dict[str, Any]:
        req = urllib.request.Request(f"http://127.0.0.1:{self.ports[service]}/graphql", method="POST",
                                     data=json.dumps({"query": query, "variables": variables or {}}).encode(),
                                     headers={"Content-Type": "application/json", **(headers or {})})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    def answers(self, service: str) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports[service]}/server_info", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def code_server_answers(self) -> bool:
        check = COMPOSE["services"]["codeserver"]["healthcheck"]["test"][1:]
        argv = local_command(check, self.ports["codeserver"], self.workspace)
        return subprocess.run(argv, env=self.env, capture_output=True, timeout=30).returncode == 0


LOCATION = {"repositoryLocationName": "msgx", "repositoryName": "__repository__"}
LAUNCH = """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) { __typename
  ... on LaunchRunSuccess { run { runId status tags { key value } } } ... on UnauthorizedError { message } } }"""


def dagster_database() -> Iterator[dict[str, str]]:
    """A throwaway database for Dagster's storage, as the DAGSTER_PG_* variables dagster.yaml reads."""
    name = f"msgx_topology_{uuid.uuid4().hex[:8]}"
    admin = urlparse(PG_ADMIN)
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield {"DAGSTER_PG_HOST": admin.hostname or "127.0.0.1", "DAGSTER_PG_PORT": str(admin.port or 5432),
               "DAGSTER_PG_USERNAME": admin.username or "postgres", "DAGSTER_PG_PASSWORD": admin.password or "",
               "DAGSTER_PG_DB": name}
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class Site:
    """One installation: its state database, mailbox, Kafka topics and Dagster storage, shared by every
    host of it (the environment of msgx.env) and the mailbox ids put so far."""
    env: dict[str, str]
    state_url: str
    mailbox_url: str
    topic: str
    sent: list[int] = field(default_factory=list)

    def host(self, home: Path) -> Topology:
        """A host's processes: the instance deploy/dagster.yaml (the runs' logs in ``home``'s shared
        folder, compose's volume) and deploy/workspace.yaml pointed at this host's code server, on free
        ports."""
        instance = yaml.safe_load((REPO / "deploy" / "dagster.yaml").read_text("utf-8"))
        instance["compute_logs"]["config"]["base_dir"] = str(home / "compute-logs")
        (home / "dagster.yaml").write_text(yaml.safe_dump(instance), "utf-8")
        ports = {name: free_port() for name in DAGSTER_SERVICES}
        workspace = yaml.safe_load((REPO / "deploy" / "workspace.yaml").read_text("utf-8"))
        workspace["load_from"][0]["grpc_server"].update(host="127.0.0.1", port=ports["codeserver"])
        (home / "workspace.yaml").write_text(yaml.safe_dump(workspace), "utf-8")
        return Topology(home, {**self.env, "DAGSTER_HOME": str(home), "MSGX_HOME": str(home / "msgx")}, ports,
                        home / "workspace.yaml",
                        self.state_url, self.mailbox_url, self.topic, sent=self.sent)


@contextmanager
def installation(pg_dbs, mysql_dbs, **env_extra: str) -> Iterator[Site]:
    """Throwaway databases and topics for one installation; DAGSTER_PG_* also set in this process
    (the tests read the instance); ``env_extra``: more settings for every process."""
    tag = uuid.uuid4().hex[:8]
    state_url, mailbox_url = pg_dbs.fresh(), mysql_dbs.fresh()
    database = dagster_database()
    dagster_pg = next(database)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MSGX_", "DAGSTER_"))}
    env.update(dagster_pg, MSGX_DB_URL=state_url, MSGX_MAILBOX_URL=mailbox_url, MSGX_KAFKA_BOOTSTRAP=KAFKA_BOOTSTRAP,
               MSGX_TOPIC_MSG=f"msg_{tag}", MSGX_TOPIC_SCHD=f"schd_{tag}", **env_extra)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in dagster_pg.items():
            mp.setenv(key, value)
        try:
            yield Site(env, state_url, mailbox_url, f"msg_{tag}")
        finally:
            next(database, None)


@contextmanager
def started(pg_dbs, mysql_dbs, home: Path, services: tuple[str, ...] = DAGSTER_SERVICES,
            **env_extra: str) -> Iterator[Topology]:
    """The Dagster processes ``services`` (the code server first) of one host of a fresh
    installation, in ``home``; ``env_extra``: more settings for every process."""
    with installation(pg_dbs, mysql_dbs, **env_extra) as site:
        top = site.host(home)
        try:
            top.start("codeserver")
            top.wait("the code server answers", top.code_server_answers, START_DEADLINE_S)
            for service in services[1:]:
                top.start(service)
            webservers = [s for s in services if s.startswith("webserver")]
            top.wait("the webservers answer", lambda: all(top.answers(s) for s in webservers), START_DEADLINE_S)
            yield top
        finally:
            top.stop_all()


def put(topology: Topology, *flids: str) -> None:
    """One GTDT message per flight into the mailbox (each changes its flight: one `msg` record)."""
    mailbox = Mailbox(topology.mailbox_url)
    try:
        topology.sent.extend(mailbox.put(gtdt(flid, (1, "A1"))) for flid in flids)
    finally:
        mailbox.dispose()


def assert_each_once(topology: Topology) -> None:
    """Every message put so far processed once (one SUCCEEDED history row each) and delivered once
    (one `msg` record each, every event id once)."""
    records = read_topic(KAFKA_BOOTSTRAP, topology.topic, len(topology.sent), timeout_s=BACK_WITHIN_S)
    assert Counter(int(r.headers["msg_id"]) for r in records) == Counter(topology.sent)
    assert len({r.headers["event_id"] for r in records}) == len(records)
    with topology.state() as conn:
        rows = conn.execute(text("SELECT msg_id, count(*) FROM proc_state_hst WHERE status = 'SUCCEEDED' "
                                 "GROUP BY msg_id")).all()
    assert {int(i): n for i, n in rows} == {i: 1 for i in topology.sent}


def replaced_within_a_minute(topology: Topology, before: str, killed_at: float) -> str:
    """The next pump run holding the writer lock, waited for until a minute after ``killed_at``."""
    after = topology.wait("a new pump run holds the writer lock",
                          lambda: (r := topology.running_pump()) != before and r,
                          BACK_WITHIN_S - (time.monotonic() - killed_at))
    took = time.monotonic() - killed_at
    assert took < BACK_WITHIN_S
    print(f"pump back {took:.1f} s after the kill")
    return after


def failure_message(topology: Topology, run_id: str) -> str:
    with topology.instance() as instance:
        [event] = instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
        return event.message or ""
