"""The production topology as plain processes (OPS-1, OPS-2): the code server, the daemon and both
webservers started with the commands of deploy/compose.yaml (only host, port and the workspace path
rewritten for loopback and free ports), the instance deploy/dagster.yaml (Dagster's storage in a
throwaway PostgreSQL database, the runs' log folder in the test's temporary folder) and
deploy/workspace.yaml (pointed at the code server's port). As in compose, where each container has
a filesystem of its own, each process runs in a working directory and DAGSTER_HOME of its own, with
only the runs' log folder in common (compose's shared volume).

One topology serves every test of the module, in order: the sensor starts the pump through the
daemon and a message reaches Kafka; a pump run worker killed with SIGKILL is replaced within a
minute; so is the pump when the code server dies with its run workers and is started again (the
daemon is not restarted), and the request-tracking run that died with them is failed and replaced
by its schedule within two minutes; nothing is lost or doubled on the way. A run's ALERT line is read
through the viewers' webserver, which shares no folder with the code server but the runs' logs. The
viewers' webserver refuses
launches, terminations and sensor or schedule switches; a launch through the operators' webserver
is tagged with the user the authenticating proxy names."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
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

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
COMPOSE = yaml.safe_load((REPO / "deploy" / "compose.yaml").read_text("utf-8"))
DAGSTER_SERVICES = ("codeserver", "daemon", "webserver-operators", "webserver-viewers")
START_DEADLINE_S = 300.0         # cold starts of four Dagster processes on a busy 2-core machine
BACK_WITHIN_S = 60.0             # the requirement: a dead pump is running again within a minute
TRACKING_BACK_WITHIN_S = 150.0   # a dead request-tracking run: the code server back, a minute tick, a run start
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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

    def start(self, service: str) -> None:
        """Start a service in a folder of its own (its working directory and DAGSTER_HOME, holding its
        copy of the instance), as a container of deploy/compose.yaml has."""
        argv = local_command(COMPOSE["services"][service]["command"], self.ports[service], self.workspace)
        own = self.home / service
        own.mkdir(exist_ok=True)
        shutil.copy(self.home / "dagster.yaml", own / "dagster.yaml")
        log = (self.home / f"{service}.log").open("ab")
        self.procs[service] = subprocess.Popen(argv, env={**self.env, "DAGSTER_HOME": str(own)}, cwd=own,
                                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def kill_tree(self, service: str) -> list[int]:
        """SIGKILL a service and every process under it (what a container's end does); their pids."""
        proc = self.procs[service]
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
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
def installation(pg_dbs, mysql_dbs) -> Iterator[Site]:
    """Throwaway databases and topics for one installation; DAGSTER_PG_* also set in this process
    (the tests read the instance)."""
    tag = uuid.uuid4().hex[:8]
    state_url, mailbox_url = pg_dbs.fresh(), mysql_dbs.fresh()
    database = dagster_database()
    dagster_pg = next(database)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MSGX_", "DAGSTER_"))}
    env.update(dagster_pg, MSGX_DB_URL=state_url, MSGX_MAILBOX_URL=mailbox_url, MSGX_KAFKA_BOOTSTRAP=KAFKA_BOOTSTRAP,
               MSGX_TOPIC_MSG=f"msg_{tag}", MSGX_TOPIC_SCHD=f"schd_{tag}")
    with pytest.MonkeyPatch.context() as mp:
        for key, value in dagster_pg.items():
            mp.setenv(key, value)
        try:
            yield Site(env, state_url, mailbox_url, f"msg_{tag}")
        finally:
            next(database, None)


@pytest.fixture(scope="module")
def topology(pg_dbs, mysql_dbs, tmp_path_factory) -> Iterator[Topology]:
    with installation(pg_dbs, mysql_dbs) as site:
        top = site.host(tmp_path_factory.mktemp("topology"))
        try:
            top.start("codeserver")
            top.wait("the code server answers", top.code_server_answers, START_DEADLINE_S)
            for service in DAGSTER_SERVICES[1:]:
                top.start(service)
            top.wait("both webservers answer", lambda: top.answers("webserver-operators")
                     and top.answers("webserver-viewers"), START_DEADLINE_S)
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


def test_sensor_starts_the_pump_through_the_daemon_and_a_message_reaches_kafka(topology):
    """OPS-1: with the processes of deploy/compose.yaml, a message in the mailbox makes inbox_sensor
    (the daemon evaluates it in the code server) start the long-lived pump, which takes the writer
    lock and delivers the message's change to Kafka. The run carries run monitoring's max runtime
    and says the sensor launched it."""
    put(topology, "T1")
    run_id = topology.wait("a pump run holds the writer lock", topology.running_pump, START_DEADLINE_S)
    assert_each_once(topology)
    [run] = [r for r in topology.pump_runs(dg.DagsterRunStatus.STARTED) if r.run_id == run_id]
    assert run.tags["msgx/launched_by"] == "sensor:inbox_sensor"
    assert int(run.tags["dagster/max_runtime"]) > 1800


CAPTURED = """query($id: ID!, $after: String) { logsForRun(runId: $id, afterCursor: $after) { __typename
  ... on EventConnection { cursor hasMore events { __typename ... on LogsCapturedEvent { fileKey } } } } }"""
LOG_TEXT = """query($key: [String!]!) { capturedLogs(logKey: $key) { stdout stderr } }"""


def captured_output(topology: Topology, service: str, run_id: str) -> str:
    """A run's captured stdout and stderr as the Dagster UI's log tabs show them: the run's
    LogsCaptured events name the files, capturedLogs reads them, all through ``service``'s GraphQL."""
    keys, after = [], None
    while True:
        page = topology.graphql(service, CAPTURED, {"id": run_id, "after": after})["data"]["logsForRun"]
        keys += [e["fileKey"] for e in page["events"] if e["__typename"] == "LogsCapturedEvent"]
        if not page["hasMore"]:
            break
        after = page["cursor"]
    texts = [topology.graphql(service, LOG_TEXT, {"key": [run_id, "compute_logs", key]})["data"]["capturedLogs"]
             for key in keys]
    return "\n".join((t["stdout"] or "") + (t["stderr"] or "") for t in texts)


def test_a_runs_alert_line_is_read_through_a_webserver_sharing_only_the_log_folder(topology):
    """OPS-2: a malformed message ends DEAD and the pump writes `ALERT dead letter: mailbox id N` to
    its run's stderr; the viewers' webserver, in another working directory and DAGSTER_HOME than the
    code server that started the run (another container, in compose), shows that line in the run's
    log, read through its GraphQL API as the UI does. Before the instance named a shared log folder,
    each process kept the logs under its own DAGSTER_HOME and that tab was empty."""
    pump = topology.wait("a pump run holds the writer lock", topology.running_pump, START_DEADLINE_S)
    mailbox = Mailbox(topology.mailbox_url)
    try:
        bad = mailbox.put("<MSG><META>")
    finally:
        mailbox.dispose()
    line = f"ALERT dead letter: mailbox id {bad} "
    view = "webserver-viewers"
    assert Path(topology.procs[view].args[0]).name == "dagster-webserver"
    text = topology.wait(f"{line!r} in the pump run's log, read through {view}",
                         lambda: line in (out := captured_output(topology, view, pump)) and out,
                         BACK_WITHIN_S)
    assert line in text


LOCATION = {"repositoryLocationName": "msgx", "repositoryName": "__repository__"}
LAUNCH = """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) { __typename
  ... on LaunchRunSuccess { run { runId status tags { key value } } } ... on UnauthorizedError { message } } }"""
LAUNCH_LEGACY = LAUNCH.replace("launchRun(", "launchPipelineExecution(")
TERMINATE = """mutation($id: String!) { terminateRun(runId: $id) { __typename
  ... on TerminateRunSuccess { run { runId } } ... on TerminateRunFailure { message }
  ... on UnauthorizedError { message } } }"""
SENSOR = """query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) { __typename
  ... on Sensor { sensorState { id status } } } }"""
STOP_SENSOR = """mutation($id: String!) { stopSensor(id: $id) { __typename ... on UnauthorizedError { message } } }"""
START_SCHEDULE = """mutation($s: ScheduleSelector!) { startSchedule(scheduleSelector: $s) { __typename
  ... on UnauthorizedError { message } } }"""


def drain_params(**tags: str) -> dict:
    return {"p": {"selector": {**LOCATION, "jobName": "pump_job"}, "runConfigData": {},
                  "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in tags.items()]}}}


def test_viewers_webserver_refuses_launches_terminations_and_switches(topology):
    """OPS-2: the read-only webserver refuses every changing mutation for want of permission: a
    launch (both mutation names), terminating the running pump, stopping inbox_sensor, starting a
    schedule; the sensor stays on and the pump keeps running."""
    pump = topology.wait("a pump run holds the writer lock", topology.running_pump, START_DEADLINE_S)
    view = "webserver-viewers"
    sensor = {**LOCATION, "sensorName": "inbox_sensor"}
    state = topology.graphql(view, SENSOR, {"s": sensor})["data"]["sensorOrError"]["sensorState"]
    answers = {
        "launchRun": topology.graphql(view, LAUNCH, drain_params()),
        "launchPipelineExecution": topology.graphql(view, LAUNCH_LEGACY, drain_params()),
        "terminateRun": topology.graphql(view, TERMINATE, {"id": pump}),
        "stopSensor": topology.graphql(view, STOP_SENSOR, {"id": state["id"]}),
        "startSchedule": topology.graphql(view, START_SCHEDULE,
                                          {"s": {**LOCATION, "scheduleName": "compare_job_schedule"}}),
    }
    refused = {name: answer["data"][name]["__typename"] for name, answer in answers.items()}
    # terminating answers with its own failure type, naming the missing permission
    assert refused == {**dict.fromkeys(answers, "UnauthorizedError"), "terminateRun": "TerminateRunFailure"}
    assert "permission" in answers["terminateRun"]["data"]["terminateRun"]["message"]
    again = topology.graphql(view, SENSOR, {"s": sensor})["data"]["sensorOrError"]["sensorState"]
    assert again["status"] == state["status"] == "RUNNING"
    assert topology.running_pump() == pump


def test_operators_launch_is_tagged_with_the_proxys_user(topology):
    """OPS-2: a launch through the operators' webserver carrying the authenticating proxy's
    X-Forwarded-User header is tagged msgx/launched_by with that user, whatever tag the client sent
    itself; without the header it says unauthenticated. (The runs wait behind the running pump's
    singleton slot, and the operators' webserver may terminate them: it is not read-only.)"""
    ops = "webserver-operators"
    launched = {}
    for header in ({"X-Forwarded-User": "alice"}, {}):
        answer = topology.graphql(ops, LAUNCH, drain_params(**{"msgx/launched_by": "mallory"}), headers=header)
        run = answer["data"]["launchRun"]["run"]
        launched[run["runId"]] = header.get("X-Forwarded-User", "unauthenticated")
    with topology.instance() as instance:
        for run_id, who in launched.items():
            run = instance.get_run_by_id(run_id)
            assert run is not None and run.tags["msgx/launched_by"] == who
    for run_id in launched:
        assert topology.graphql(ops, TERMINATE, {"id": run_id})["data"]["terminateRun"]["__typename"] == \
            "TerminateRunSuccess"
    topology.wait("the launched runs are canceled", lambda: all(
        topology.run_status(r) == dg.DagsterRunStatus.CANCELED for r in launched), 30)


def test_a_killed_pump_run_worker_is_replaced_within_a_minute(topology):
    """OPS-1: SIGKILL of the pump's run worker (its code server lives on and reports it): the run
    is marked failed and a new pump holds the writer lock within 60 s; the messages put while no
    pump ran are processed and delivered, every message once."""
    before = topology.wait("a pump run holds the writer lock", topology.running_pump, START_DEADLINE_S)
    put(topology, "K1")
    assert_each_once(topology)
    os.kill(topology.pump_pid(), signal.SIGKILL)
    killed_at = time.monotonic()
    put(topology, "K2", "K3")
    replaced_within_a_minute(topology, before, killed_at)
    assert topology.run_status(before) == dg.DagsterRunStatus.FAILURE
    assert_each_once(topology)


def test_pump_and_request_tracking_are_back_after_the_code_server_dies_with_its_runs(topology):
    """OPS-1: SIGKILL of the code server and every process under it (its run workers, the pump's
    and the request-tracking run's among them: nothing is left to report the runs), then the code
    server started again as compose or systemd would; the daemon is not restarted. inbox_sensor
    sees the STARTED pump run without the writer lock, marks it failed and starts a new pump, which
    holds the lock within 60 s of the kill; every message is processed and delivered once. The
    request-tracking schedule sees its STARTED run's heartbeat name a process that is gone, marks it
    failed and starts the next run, which beats from a new process within two and a half minutes of
    the kill (OPS-2: request tracking does not silently stop)."""
    before = topology.wait("a pump run holds the writer lock", topology.running_pump, START_DEADLINE_S)
    put(topology, "C1")
    assert_each_once(topology)
    pid = topology.pump_pid()
    tracking, tracking_pid = topology.wait("a request-tracking run beats", topology.tracking_run,
                                           START_DEADLINE_S)
    killed = topology.kill_tree("codeserver")
    killed_at = time.monotonic()
    assert pid in killed and tracking_pid in killed
    put(topology, "C2", "C3")
    topology.start("codeserver")
    topology.wait("the code server answers again", topology.code_server_answers, BACK_WITHIN_S)
    print(f"code server answers {time.monotonic() - killed_at:.1f} s after the kill")
    topology.wait("the orphaned run is failed",
                  lambda: topology.run_status(before) == dg.DagsterRunStatus.FAILURE, BACK_WITHIN_S)
    print(f"orphaned run failed {time.monotonic() - killed_at:.1f} s after the kill")
    replaced_within_a_minute(topology, before, killed_at)
    assert topology.run_status(before) == dg.DagsterRunStatus.FAILURE
    assert "inbox_sensor marks it failed" in failure_message(topology, before)
    assert_each_once(topology)

    successor, successor_pid = topology.wait(
        "a new request-tracking run beats", lambda: (r := topology.tracking_run()) and r[0] != tracking and r,
        TRACKING_BACK_WITHIN_S - (time.monotonic() - killed_at))
    took = time.monotonic() - killed_at
    assert took < TRACKING_BACK_WITHIN_S and successor_pid != tracking_pid
    print(f"request tracking back {took:.1f} s after the kill")
    assert topology.run_status(tracking) == dg.DagsterRunStatus.FAILURE
    assert "its schedule marks it failed" in failure_message(topology, tracking)
    with topology.instance() as instance:
        run = instance.get_run_by_id(successor)
        assert run is not None and run.tags["msgx/launched_by"] == "schedule:request_tracking_job_schedule"
        assert int(run.tags["dagster/max_runtime"]) > 600


DAEMON_AWAY_S = 90.0    # the daemon's outage, compressed from the ten minutes of a long maintenance


def test_the_pump_goes_on_while_the_daemon_is_stopped_and_the_daemon_comes_back(topology):
    """OPS-1: the Dagster daemon stopped cleanly (SIGTERM to its process group, as `systemctl stop`
    does) for DAEMON_AWAY_S while rows arrive: the running pump, whose run worker lives in the code
    server, processes and delivers every row meanwhile, each once; when the daemon is started again
    it beats within a minute, and the same pump run still holds the writer lock (none failed, none
    launched twice)."""
    put(topology, "DA0")
    before = topology.wait("a pump run holds the writer lock", topology.running_pump, START_DEADLINE_S)
    assert_each_once(topology)
    daemon = topology.procs.pop("daemon")        # topology.wait fails on an exited process
    os.killpg(daemon.pid, signal.SIGTERM)
    daemon.wait(60)
    stopped_at = time.monotonic()
    arrived = 0
    while time.monotonic() - stopped_at < DAEMON_AWAY_S:
        put(topology, f"DA{arrived + 1}")
        arrived += 1
        topology.wait("the row processed without the daemon",
                      lambda: topology.running_pump() == before and _processed(topology) >= len(topology.sent),
                      BACK_WITHIN_S)
        time.sleep(10)                            # rows arrive over the whole outage
    assert_each_once(topology)
    restarted = time.time()
    topology.start("daemon")

    def beats() -> bool:
        with topology.instance() as instance:
            return any(h.timestamp > restarted for h in instance.get_daemon_heartbeats().values())
    topology.wait("the daemon beats again", beats, BACK_WITHIN_S)
    assert topology.running_pump() == before, "the pump run changed while the daemon was away"
    assert [r.run_id for r in topology.pump_runs(dg.DagsterRunStatus.STARTED)] == [before]
    print(f"daemon away {DAEMON_AWAY_S:.0f} s: {arrived} rows processed meanwhile by pump run {before}")


def _processed(topology: Topology) -> int:
    with topology.state() as conn:
        return int(conn.execute(text("SELECT count(*) FROM proc_state WHERE status = 'SUCCEEDED'")).scalar_one())
