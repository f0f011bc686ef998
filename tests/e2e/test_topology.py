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
is tagged with the user the authenticating proxy names. A code server given SIGTERM under a running
pump launches nothing and exits; the daemon stopped for 90 s leaves the running pump going. The
daemon's clock stepped past 22:00, back an hour across it and past it again asks the AODB for the
day plan once."""


from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from datetime import time as dt_time
from pathlib import Path
from zoneinfo import ZoneInfo

import dagster as dg
import psutil
import pytest
from sqlalchemy import text

from msgx_engine.clock import DatabaseClock
from msgx_engine.db import make_engine
from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.requests.tracker import RequestTracker
from tests.clock_shims import DAEMON_CLOCK_SHIM
from tests.recovery import recovery
from tests.topology_support import (
    BACK_WITHIN_S,
    LAUNCH,
    LOCATION,
    START_DEADLINE_S,
    TRACKING_BACK_WITHIN_S,
    Topology,
    assert_each_once,
    failure_message,
    put,
    replaced_within_a_minute,
    started,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def topology(pg_dbs, mysql_dbs, tmp_path_factory) -> Iterator[Topology]:
    with started(pg_dbs, mysql_dbs, tmp_path_factory.mktemp("topology")) as top:
        yield top


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
    recovery("pump run worker killed", killed_at, "the kill -> a new pump run holds the writer lock")
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
    restarted = time.monotonic()
    topology.wait("the code server answers again", topology.code_server_answers, BACK_WITHIN_S)
    print(f"code server answers {time.monotonic() - killed_at:.1f} s after the kill")
    topology.wait("the orphaned run is failed",
                  lambda: topology.run_status(before) == dg.DagsterRunStatus.FAILURE, BACK_WITHIN_S)
    print(f"orphaned run failed {time.monotonic() - killed_at:.1f} s after the kill")
    replaced_within_a_minute(topology, before, killed_at)
    recovery("code server killed with its runs", restarted,
             "the code server started again -> a new pump run holds the writer lock")
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


STOP_WITHIN_S = 30.0     # a code server given SIGTERM is gone within 30 s (systemd waits 90)


def still_running(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``processes`` that have not ended (a zombie has: it only waits to be reaped)."""
    alive = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.NoSuchProcess:
            pass
    return alive


def test_code_server_stopped_with_sigterm_under_a_running_pump_launches_nothing_and_exits(topology):
    """OPS-1, T6: the code server started as a script's background job starts it (SIGINT
    ignored, which Dagster's code server would turn into SIGTERM ignored) and stopped as systemd
    stops a unit, SIGTERM to every process of it, while inbox_sensor is on and a pump runs: the pump
    ends cleanly (its run succeeds), no run starts after the signal, and every process of the code
    server has exited within 30 s, long before systemd's SIGKILL. Started again, the code server
    gets the next pump from the sensor; every message is processed and delivered once."""
    topology.kill_tree("codeserver")
    topology.start("codeserver", sigint_ignored=True)
    topology.wait("the code server answers", topology.code_server_answers, START_DEADLINE_S)
    put(topology, "S1")
    before = topology.wait("a pump run holds the writer lock", topology.running_pump, START_DEADLINE_S)
    assert_each_once(topology)
    tree = topology.tree("codeserver")
    signalled_at, signalled_wall = time.monotonic(), time.time()
    os.killpg(topology.procs["codeserver"].pid, signal.SIGTERM)
    end = signalled_at + STOP_WITHIN_S
    while still_running(tree) and time.monotonic() < end:
        time.sleep(0.2)
    alive = still_running(tree)
    for p in alive:
        p.kill()
    assert not alive, f"still running {STOP_WITHIN_S:.0f} s after SIGTERM: {alive}\n{topology.logs()}"
    print(f"code server gone {time.monotonic() - signalled_at:.1f} s after SIGTERM")
    topology.procs["codeserver"].wait(5)
    assert topology.run_status(before) == dg.DagsterRunStatus.SUCCESS
    with topology.instance() as instance:
        started = [(r.dagster_run.job_name, r.dagster_run.status) for r in instance.get_run_records()
                   if r.start_time is not None and r.start_time > signalled_wall]
    assert not started
    put(topology, "S2")
    topology.start("codeserver")
    restarted = time.monotonic()
    topology.wait("the code server answers again", topology.code_server_answers, START_DEADLINE_S)
    topology.wait("a new pump run holds the writer lock", lambda: (r := topology.running_pump()) != before and r,
                  BACK_WITHIN_S)
    recovery("code server stopped with SIGTERM under a running pump", restarted,
             "the code server started again -> a new pump run holds the writer lock")
    assert_each_once(topology)

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
    restarted, started_at = time.time(), time.monotonic()
    topology.start("daemon")

    def beats() -> bool:
        with topology.instance() as instance:
            return any(h.timestamp > restarted for h in instance.get_daemon_heartbeats().values())
    topology.wait("the daemon beats again", beats, BACK_WITHIN_S)
    recovery(f"Dagster daemon stopped for {DAEMON_AWAY_S:.0f} s", started_at,
             "the daemon started again -> it beats (the pump never stopped)")
    assert topology.running_pump() == before, "the pump run changed while the daemon was away"
    assert [r.run_id for r in topology.pump_runs(dg.DagsterRunStatus.STARTED)] == [before]
    print(f"daemon away {DAEMON_AWAY_S:.0f} s: {arrived} rows processed meanwhile by pump run {before}")


def _processed(topology: Topology) -> int:
    with topology.state() as conn:
        return int(conn.execute(text("SELECT count(*) FROM proc_state WHERE status = 'SUCCEEDED'")).scalar_one())


AIRPORT = ZoneInfo("Asia/Shanghai")     # the 22:00 schedule's execution timezone (msgx_dagster/schedules.py)
EVALUATED = re.compile(r"Evaluating schedule `\w+` at (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4})")



def _day_plans(topology: Topology) -> tuple[list[tuple], int]:
    """The RQFD requests in req_track (req_id, fday, status) and the RQFD rows in COUTMSGS."""
    with topology.state() as conn:
        requests = [tuple(r) for r in conn.execute(text(
            "SELECT req_id, fday, status FROM req_track WHERE rtype = 'RQFD' ORDER BY req_id"))]
    mailbox = Mailbox(topology.mailbox_url)
    try:
        with mailbox.engine.connect() as conn:
            written = int(conn.execute(text("SELECT count(*) FROM coutmsgs WHERE ROUTINGID = 'VIEWRQFD'")).scalar_one())
    finally:
        mailbox.dispose()
    return requests, written


def test_the_day_plan_schedule_under_a_stepped_daemon_clock_asks_the_aodb_once(topology):
    """T12, F1: the 22:00 schedule's tick follows the Dagster daemon host's clock. The daemon is
    started again with its wall clock stepped by DAEMON_CLOCK_SHIM (time.time and Dagster's reading
    of the current time moved by the offset in a file; the monotonic clock and the C libraries left
    alone, as a real step leaves them. Debian's libfaketime cannot step it: under it, even at a
    constant offset, the daemon's gRPC client never reaches the code server, "connect() timed out",
    and with the monotonic clock left alone libfaketime 0.9.10 makes time.sleep fail with EINVAL.
    The fault matrix's shim, which replaces the datetime class, fails Dagster's own type checks),
    set to 15 s
    before the next 22:00 airport time: the schedule ticks once past 22:00 and the day plan for
    PostgreSQL's tomorrow is registered once.
    Then the daemon's clock is stepped back an hour across 22:00 and, once its scheduler has run
    there, forward again to just before 22:00 (the hour compressed), so its clock passes 22:00 a
    second time: still one RQFD for that day, and one written to COUTMSGS when request tracking
    sends (a round of what request_tracking_job does). Dagster's own tick cursor may already keep a
    second tick from running; the job registers nothing for a day already asked for either way."""
    shim, offset = topology.home / "daemon-wallclock", topology.home / "daemon-clock-offset"
    seen = topology.home / "daemon-clock-seen"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(DAEMON_CLOCK_SHIM, "utf-8")

    def step_to(wall: datetime) -> float:
        """Set the daemon's clock to read ``wall`` now; the offset in seconds."""
        seconds = wall.timestamp() - time.time()
        offset.write_text(f"{round(seconds)}")
        return seconds

    now = datetime.now(AIRPORT)
    tick = datetime.combine(now.date(), dt_time(22, 0), AIRPORT)
    if tick - now < timedelta(minutes=1):
        tick += timedelta(days=1)
    step_to(tick - timedelta(seconds=15))
    daemon = topology.procs.pop("daemon")
    os.killpg(daemon.pid, signal.SIGTERM)
    daemon.wait(60)
    topology.start("daemon", env={"PYTHONPATH": str(shim), "MSGX_TEST_WALL_OFFSET_FILE": str(offset),
                                  "MSGX_TEST_WALL_SEEN_FILE": str(seen)})
    wanted = dg.RunsFilter(job_name="snapshot_request_job")

    def day_plan_runs() -> list[dg.DagsterRun]:
        with topology.instance() as instance:
            return list(instance.get_runs(wanted))

    def finished() -> bool:
        runs = day_plan_runs()
        return bool(runs) and all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
    topology.wait("the 22:00 tick's day-plan run succeeds", finished, BACK_WITHIN_S + 30)
    first = day_plan_runs()
    assert len(first) == 1, [r.run_id for r in first]
    assert first[0].tags["msgx/launched_by"] == "schedule:snapshot_request_job_schedule"
    with topology.state() as conn:
        tomorrow = conn.execute(text("SELECT (clock_timestamp() AT TIME ZONE 'Asia/Shanghai')::date + 1")).scalar_one()
    requests, _ = _day_plans(topology)
    assert [fday for _, fday, _ in requests] == [tomorrow], requests

    def evaluated() -> list[datetime]:
        """The tick times the daemon's scheduler has evaluated, as its log says."""
        log = re.sub(r"\x1b\[[0-9;]*m", "", (topology.home / "daemon.log").read_text("utf-8", "replace"))
        return [datetime.strptime(t, "%Y-%m-%d %H:%M:%S %z") for t in EVALUATED.findall(log)]
    last = max(evaluated())
    back = step_to(tick - timedelta(minutes=59, seconds=30))       # an hour back across 22:00
    topology.wait("the daemon reads its clock stepped back",
                  lambda: seen.exists() and abs(float(seen.read_text()) - round(back)) < 1, 30)
    # the hour until its clock passes 22:00 again, compressed: just before the next minute tick
    # after the last one evaluated, so the scheduler's next pass is past 22:00 and due a tick
    step_to(last + timedelta(seconds=57))
    topology.wait("the scheduler evaluates a tick past 22:00 a second time",
                  lambda: max(evaluated()) > last, 60)
    topology.wait("no day-plan run left unfinished", finished, BACK_WITHIN_S)
    offset.write_text("0")
    ticked = len(day_plan_runs())
    engine, mailbox = make_engine(topology.state_url, single=True), Mailbox(topology.mailbox_url)
    try:
        RequestTracker(engine, mailbox, DatabaseClock(engine)).send_pending()
    finally:
        engine.dispose()
        mailbox.dispose()
    requests, written = _day_plans(topology)
    assert [fday for _, fday, _ in requests] == [tomorrow], requests
    assert written == 1, f"{written} day-plan requests written to COUTMSGS for {tomorrow}"
    print(f"day plan under a stepped daemon clock: {ticked} snapshot_request_job run(s) for two passes "
          f"of 22:00, one RQFD for {tomorrow}, written once")
