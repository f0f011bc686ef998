"""Every job's run survives a code server that dies with its run workers (OPS-1, T5).

One topology (the code server and the daemon as processes, the instance deploy/dagster.yaml, the
operators' webserver to launch through) serves every job of the code location. A run of each job
is started and held in progress: the test holds every table of msgx's state database locked, so
each run waits at its first statement. The code server is then killed with every process under
it (its run workers among them: nothing is left to report their runs), the lock is let go, and
the code server is started again as systemd or compose would; the daemon is not restarted. Each
run must be marked failed and the next run of its job must start within two minutes of the kill:
the pump's through inbox_sensor, the request tracker's through its schedule, every other job's
through run_worker_sensor."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import dagster as dg
import pytest
import redis
from sqlalchemy import text

from msgx_dagster.jobs.common import ACTIVE
from msgx_engine.db import make_engine
from tests.conftest import REDIS_URL
from tests.dagster_support import op_config
from tests.topology_support import LAUNCH, LOCATION, START_DEADLINE_S, Topology, started

pytestmark = pytest.mark.slow

BOUND_S = 120.0              # the next run of the job can start within two minutes of the kill
AUDIT = {"operator": "orphan test", "reason": "a run orphaned by its code server"}
# A run config per job that reaches the state database (each then waits on the test's lock).
RUN_CONFIG = {
    "pump_job": {},
    "backfill_job": {},
    "dispatch_job": {},
    "projection_rebuild_job": {},
    "request_tracking_job": {},
    "snapshot_request_job": {},
    "reference_refresh_job": {},
    "replay_job": op_config("replay_op", ids=[1]),
    "archive_job": {},
    "monitor_job": {},
    "acknowledge_job": op_config("acknowledge_op", ids=[1], **AUDIT),
    "outbox_revive_job": op_config("outbox_revive_op", all_dead=True, **AUDIT),
    "compare_job": None,           # against this installation itself (its URL is the topology's)
}
# Jobs that share another job's `singleton` slot: their run waits in the queue behind that job's.
SAME_SLOT = {"reference_refresh_job": "snapshot_request_job"}
JOBS_QUERY = """query($r: RepositorySelector!) { repositoryOrError(repositorySelector: $r) {
  ... on Repository { jobs { name } } } }"""
# The sensors and the schedule that read msgx's database on every evaluation: they are switched off
# while the test holds its lock (each blocked evaluation would hold a thread of the code server,
# and launches would crawl) and on again once the code server is back.
PAUSED = {"sensor": ["inbox_sensor", "health_sensor"], "schedule": ["request_tracking_job_schedule"]}
STATE = {"sensor": """query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) {
           ... on Sensor { sensorState { id } } } }""",
         "schedule": """query($s: ScheduleSelector!) { scheduleOrError(scheduleSelector: $s) {
           ... on Schedule { scheduleState { id } } } }"""}
STOP = {"sensor": "mutation($id: String!) { stopSensor(id: $id) { __typename } }",
        "schedule": "mutation($id: String!) { stopRunningSchedule(id: $id) { __typename } }"}
START = {"sensor": "mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) { __typename } }",
         "schedule": "mutation($s: ScheduleSelector!) { startSchedule(scheduleSelector: $s) { __typename } }"}
FINISHED = (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED, dg.DagsterRunStatus.SUCCESS)


@dataclass
class Seen:
    """What became of a job's run orphaned at the kill (seconds after the kill)."""

    run_id: str | None                # None: the job's run waited in the queue behind another job's
    status: dg.DagsterRunStatus = dg.DagsterRunStatus.STARTED
    ended_s: float | None = None
    successor: str | None = None
    launched_s: float | None = None   # the queue let the next run of the job go, its launch began
    started_s: float | None = None    # that run's worker started it
    launched: list[str] = field(default_factory=list)


def launch(top: Topology, job: str) -> str:
    config = RUN_CONFIG[job]
    if config is None:
        config = op_config("compare_op", against=top.state_url)
    params = {"p": {"selector": {**LOCATION, "jobName": job}, "runConfigData": config}}
    answer = top.graphql("webserver-operators", LAUNCH, params)["data"]["launchRun"]
    assert answer["__typename"] == "LaunchRunSuccess", (job, answer)
    return answer["run"]["runId"]


def switch(top: Topology, on: bool) -> None:
    """Switch the PAUSED sensors and schedule on or off through the operators' webserver."""
    for kind, names in PAUSED.items():
        for name in names:
            selector = {"s": {**LOCATION, f"{kind}Name": name}}
            if on:
                answer = top.graphql("webserver-operators", START[kind], selector)
            else:
                state = top.graphql("webserver-operators", STATE[kind], selector)["data"][f"{kind}OrError"]
                answer = top.graphql("webserver-operators", STOP[kind], {"id": state[f"{kind}State"]["id"]})
            assert "errors" not in answer, (name, answer)


def records(top: Topology) -> list[dg.RunRecord]:
    with top.instance() as instance:
        return list(instance.get_run_records())


def started_runs(top: Topology) -> dict[str, str] | None:
    """The STARTED run of every job, once each job (but those waiting for another's slot) has one."""
    runs = {r.dagster_run.job_name: r.dagster_run.run_id for r in records(top)
            if r.dagster_run.status == dg.DagsterRunStatus.STARTED}
    return runs if set(runs) >= set(RUN_CONFIG) - set(SAME_SLOT) else None


@dataclass
class Orphans:
    top: Topology
    seen: dict[str, Seen]

    def message(self, run_id: str) -> str:
        with self.top.instance() as instance:
            ends = instance.all_logs(run_id, of_type={dg.DagsterEventType.RUN_FAILURE,
                                                      dg.DagsterEventType.RUN_CANCELED})
        return " ".join(e.message or "" for e in ends)


def hold_every_run(top: Topology) -> tuple[dict[str, str], float]:
    """Lock every table of the state database, start a run of each job that has none in progress,
    kill the code server with its run workers once every job's run is STARTED, then let go of the
    lock: the orphaned run of each job, and the time of the kill (Unix time)."""
    switch(top, on=False)
    engine = make_engine(top.state_url, single=True)
    try:
        with engine.connect() as conn:
            conn.execute(text("SET lock_timeout = '60s'"))
            tables = conn.execute(text("SELECT quote_ident(tablename) FROM pg_tables "
                                       "WHERE schemaname = current_schema()")).scalars().all()
            conn.execute(text(f"LOCK TABLE {', '.join(tables)} IN ACCESS EXCLUSIVE MODE"))
            active = {r.dagster_run.job_name for r in records(top) if r.dagster_run.status in ACTIVE}
            for job in [j for j in RUN_CONFIG if j not in active and j not in SAME_SLOT]:
                launch(top, job)
            runs = top.wait("a run of every job is in progress", lambda: started_runs(top), START_DEADLINE_S)
            for job in SAME_SLOT:         # queued behind the run holding the slot
                launch(top, job)
            top.kill_tree("codeserver")
            killed = time.time()
            conn.rollback()
    finally:
        engine.dispose()
    return runs, killed


def launched_at(instance: dg.DagsterInstance, run_id: str) -> float | None:
    """When the queue let the run go and its launch began (Unix time), if it did."""
    [*starting] = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.RUN_STARTING).records
    return starting[0].timestamp if starting else None


def watch(top: Topology, runs: dict[str, str], killed: float) -> dict[str, Seen]:
    """Until every job's next run has started (or a minute past the bound): when each orphan ended,
    and when a later run of its job was launched and started (one is launched if none waits)."""
    seen = {job: Seen(runs.get(job), ended_s=None if job in runs else 0.0) for job in RUN_CONFIG}
    with top.instance() as instance:
        while time.time() < killed + BOUND_S + 60 and any(s.started_s is None for s in seen.values()):
            recs = {r.dagster_run.run_id: r for r in instance.get_run_records()}
            for job, s in seen.items():
                mine = {i: r for i, r in recs.items() if r.dagster_run.job_name == job}
                if s.ended_s is None and (orphan := mine[s.run_id]).dagster_run.status in FINISHED:
                    s.status, s.ended_s = orphan.dagster_run.status, (orphan.end_time or time.time()) - killed
                    if not any(r.dagster_run.status in ACTIVE for r in mine.values()):
                        s.launched.append(launch(top, job))
                if s.ended_s is None:
                    continue
                for i, r in mine.items():
                    if i == s.run_id or r.dagster_run.status in (dg.DagsterRunStatus.QUEUED,
                                                                 dg.DagsterRunStatus.NOT_STARTED):
                        continue
                    at = launched_at(instance, i)
                    if at is not None and at > killed and (s.launched_s is None or at - killed < s.launched_s):
                        s.launched_s, s.successor = at - killed, i
                if s.successor is not None and (started := mine[s.successor].start_time) is not None:
                    s.started_s = started - killed
            time.sleep(1)
    return seen


@pytest.fixture(scope="module")
def orphans(pg_dbs, mysql_dbs, tmp_path_factory) -> Iterator[Orphans]:
    key = f"flightInfo_orphans_{uuid.uuid4().hex[:8]}"
    services = ("codeserver", "daemon", "webserver-operators")
    try:
        with started(pg_dbs, mysql_dbs, tmp_path_factory.mktemp("orphans"), services,
                     MSGX_REDIS_URL=REDIS_URL, MSGX_REDIS_KEY=key) as top:
            answer = top.graphql("webserver-operators", JOBS_QUERY, {"r": LOCATION})
            jobs = {j["name"] for j in answer["data"]["repositoryOrError"]["jobs"] if not j["name"].startswith("__")}
            assert jobs == set(RUN_CONFIG)        # a new job needs its line here
            runs, killed = hold_every_run(top)
            top.start("codeserver")
            top.wait("the code server answers again", top.code_server_answers, BOUND_S)
            switch(top, on=True)
            seen = watch(top, runs, killed)
            for job, s in seen.items():
                print(f"{job}: {s.status.value} at {s.ended_s}, next launched at {s.launched_s}, started at "
                      f"{s.started_s} (s after the kill)")
            yield Orphans(top, seen)
    finally:
        redis.Redis.from_url(REDIS_URL).delete(key)


JUDGE = {"pump_job": "inbox_sensor marks it failed", "request_tracking_job": "its schedule marks it failed"}


@pytest.mark.parametrize("job", list(RUN_CONFIG))
def test_a_run_orphaned_by_its_code_server_is_failed_and_the_next_starts_within_two_minutes(orphans, job):
    """OPS-1, T5: the job's run, in progress when its code server died with its run workers, is
    marked failed with the reason, by the sensor or schedule that judges the job's runs; the next
    run of the job has left the queue and its launch begun within two minutes of the kill (the
    slot is free; how long its worker then takes to start is the host's load), and it starts."""
    seen = orphans.seen[job]
    if job in SAME_SLOT:          # its run waited behind the other job's orphaned run
        seen = orphans.seen[SAME_SLOT[job]]
    assert seen.run_id is not None and seen.status == dg.DagsterRunStatus.FAILURE, (job, seen)
    assert JUDGE.get(job, "run_worker_sensor marks it failed") in orphans.message(seen.run_id)
    seen = orphans.seen[job]
    assert seen.launched_s is not None and seen.launched_s < BOUND_S, (job, seen)
    assert seen.started_s is not None, (job, seen)
