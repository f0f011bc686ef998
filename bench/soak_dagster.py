"""The soak's pump as a Dagster run: ``dagster dev`` with the msgx code location, whose inbox sensor
starts the long-lived pump run, instead of a ``msgx pump`` process.

``DagsterStack`` starts ``dagster dev -m msgx_dagster.definitions`` as ``bench_latency.py``'s
dagster mode does (a fresh DAGSTER_HOME whose dagster.yaml is the run limits of
``msgx_engine.demo.instance``, a free port, every schedule and sensor as the code location
defines them), and finds the process that executes the pump: the run worker of the STARTED
``pump_job`` run. Dagster says which process that is in the run's first engine event ("Started
process for run (pid: N)"), read through the webserver's GraphQL API, the interface the UI uses;
the run is taken as executing once the pump of that process has written its heartbeat in msgx's
PostgreSQL (it does so right after taking the writer lock). ``pump_job`` runs its op in the run
worker itself (in-process executor), so that pid is the pump with its inline dispatcher thread,
and its process tree adds the offload helper and Dagster's capture of the run's output (two
``tail -F`` and two ``watch_orphans.py``, which cost next to nothing).

A long-lived pump run ends itself: the sensor's run config gives it 600 s of idling and the
default max runtime of 1,800 s (``jobs/pump.py``), so an hour's soak sees a run end at about 30
minutes and the sensor (evaluated every 5 s while work waits) start the next one, with some
seconds of no pump between them. The run's ``dagster/max_runtime`` tag (2,400 s) would only act
under run monitoring, which this instance (the run limits alone) does not turn on. ``pump_pid``
follows to the new run worker, and ``cpu_seconds`` adds up the CPU of every pump run so a figure
sampled across the change stays a difference of two readings of one counter.

Dagster starts other runs beside the pump, in processes of their own: request tracking loops
(one run every ten minutes), and a minute tick that finds no long-lived pump run queued or active
(before the first one, or between two) starts a dispatch_job and a backfill_job run.

The sensor starts a pump only when the mailbox has work, so ``pump_pid`` waits for the first run
as long as its timeout allows: call it once messages are in the mailbox (a backlog inserted
beforehand, or the feeder started).

``stop`` stops everything the way ``msgx demo`` does on Ctrl-C: the daemon is frozen so that no sensor
or schedule starts a run meanwhile, the runs are terminated through the webserver (the pump
finishes its unit of work and its run ends), ``dagster dev`` is interrupted, and whatever of its
process group or of the processes seen under it is left after a short grace is killed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import psycopg
from bench_latency import free_port
from proctree import alive, descendants, started_at, tree_cpu_seconds

from msgx_engine.demo.instance import RUN_LIMITS
from msgx_engine.demo.run import RUNS_STOP_S, freeze_daemon, stop_dev
from msgx_engine.demo.webserver import Webserver, WebserverError

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parent.parent

# The code location's names (msgx_dagster.definitions, jobs/pump.py, sensors/inbox.py): plain
# strings, so this process never imports Dagster.
LOCATION = "msgx_dagster.definitions"
REPOSITORY = "__repository__"
PUMP_JOB = "pump_job"
INBOX_SENSOR = "inbox_sensor"

POLL_S = 0.5
CPU_EVERY_S = 1.0                  # how often the CPU of the current pump run's tree is read

_PUMP_RUNS = """
query SoakPumpRuns($filter: RunsFilter) {
  runsOrError(filter: $filter, limit: 5) {
    __typename
    ... on Runs { results { runId status startTime } }
  }
}
"""

_RUN_EVENTS = """
query SoakRunEvents($runId: ID!) {
  logsForRun(runId: $runId, limit: 100) {
    __typename
    ... on EventConnection {
      events {
        __typename
        ... on EngineEvent { message metadataEntries { label ... on TextMetadataEntry { text } } }
      }
    }
  }
}
"""

_SENSOR_TICKS = """
query SoakSensorTicks($selector: SensorSelector!) {
  sensorOrError(sensorSelector: $selector) {
    __typename
    ... on Sensor { sensorState { status ticks(limit: 1) { status } } }
  }
}
"""

_STARTED_PROCESS = re.compile(r"Started process for run \(pid: (\d+)\)")


class StackError(RuntimeError):
    """Dagster did not come up, or no pump run started in time."""


@dataclass(frozen=True)
class PumpRun:
    """One pump run the stack has seen executing: its Dagster run id, its run worker's pid, and
    when Dagster says it started (Unix time)."""

    run_id: str
    pid: int
    started: float


class _Graphql(Webserver):
    """The demo's webserver client plus the three questions the soak asks."""

    def pump_runs_started(self) -> list[tuple[str, float]]:
        """(run id, start time) of the STARTED ``pump_job`` runs (one at most: the singleton limit)."""
        found = self._post(_PUMP_RUNS, {"filter": {"pipelineName": PUMP_JOB, "statuses": ["STARTED"]}})
        runs = found.get("runsOrError") or {}
        if runs.get("__typename") != "Runs":
            raise WebserverError(f"runs not listed: {runs.get('__typename')}")
        return [(r["runId"], float(r["startTime"] or 0.0)) for r in runs.get("results", [])]

    def run_worker_pid(self, run_id: str) -> int | None:
        """The pid of the process Dagster started for the run, from its engine event (None: not yet)."""
        found = self._post(_RUN_EVENTS, {"runId": run_id}).get("logsForRun") or {}
        for event in found.get("events") or []:
            if event.get("__typename") != "EngineEvent":
                continue
            for entry in event.get("metadataEntries") or []:
                if entry.get("label") == "pid" and str(entry.get("text", "")).isdigit():
                    return int(entry["text"])
            match = _STARTED_PROCESS.search(event.get("message") or "")
            if match:
                return int(match.group(1))
        return None

    def inbox_sensor_ticked(self) -> bool:
        """The inbox sensor is running and has been evaluated once: the code location loaded and
        the daemon works."""
        selector = {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY, "sensorName": INBOX_SENSOR}
        found = self._post(_SENSOR_TICKS, {"selector": selector}).get("sensorOrError") or {}
        if found.get("__typename") != "Sensor":
            return False
        state = found.get("sensorState") or {}
        return state.get("status") == "RUNNING" and bool(state.get("ticks"))


# --- the stack -------------------------------------------------------------------------------------
class DagsterStack:
    """``dagster dev`` with the msgx code location, its pump run found by ``pump_pid``.

    ``env``: the environment of the Dagster processes (the MSGX_* settings; no
    MSGX_KAFKA_BOOTSTRAP means delivery is down: the pump runs without its inline dispatcher).
    ``work``: a directory for DAGSTER_HOME (``work/dagster_home``) and the log (``work/dagster.log``).
    """

    def __init__(self, env: Mapping[str, str], work: Path, *, port: int | None = None,
                 ready_timeout_s: float = 180.0) -> None:
        self.env = dict(env)
        self.work = Path(work)
        self.port = port or free_port()
        self.ready_timeout_s = ready_timeout_s
        self.home = self.work / "dagster_home"
        self.log = self.work / "dagster.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_file: BinaryIO | None = None
        self.runs: list[PumpRun] = []          # every pump run seen executing, in order
        self.leftovers: list[int] = []         # pids ``stop`` had to kill one by one
        self._web = _Graphql(self.port)
        self._dsn = self.env["MSGX_DB_URL"].replace("postgresql+psycopg://", "postgresql://")
        self._cpu_lock = threading.Lock()
        self._cpu_done = 0.0                   # the CPU of the pump runs that ended, as last read
        self._cpu_last: dict[int, float] = {}  # pid -> its tree's CPU at the last reading
        self._cpu_stop = threading.Event()
        self._cpu_thread = threading.Thread(target=self._watch_cpu, name="soak-dagster-cpu", daemon=True)

    # --- start ---------------------------------------------------------------------------------
    def __enter__(self) -> DagsterStack:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> DagsterStack:
        """Start ``dagster dev`` and wait until the inbox sensor has been evaluated (the code
        location loaded, the daemon ticks). Does not wait for a pump run: see ``pump_pid``."""
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "dagster.yaml").write_text(RUN_LIMITS + "telemetry:\n  enabled: false\n", "utf-8")
        self._log_file = self.log.open("wb")
        self.proc = subprocess.Popen(
            [str(BIN / "dagster"), "dev", "-m", LOCATION, "-h", "127.0.0.1", "-p", str(self.port)],
            env={**self.env, "DAGSTER_HOME": str(self.home)}, stdout=self._log_file,
            stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
        try:
            deadline = time.monotonic() + self.ready_timeout_s
            while not self._ask(self._web.inbox_sensor_ticked, False):
                self._check_running()
                if time.monotonic() >= deadline:
                    raise StackError(f"the inbox sensor was not evaluated within {self.ready_timeout_s:.0f} s; "
                                     f"see {self.log}")
                time.sleep(POLL_S)
        except BaseException:
            self.stop()                # a ``with`` block never reaches __exit__ when __enter__ raises
            raise
        self._cpu_thread.start()
        return self

    def poll(self) -> int | None:
        """``dagster dev``'s exit status, None while it runs."""
        return None if self.proc is None else self.proc.poll()

    def _check_running(self) -> None:
        if self.proc is None:
            raise StackError("the stack was not started")
        if self.proc.poll() is not None:
            raise StackError(f"dagster dev exited ({self.proc.returncode}); see {self.log}")

    @staticmethod
    def _ask(question: Any, default: Any) -> Any:
        """A webserver question, ``default`` while it does not answer (starting up, or busy)."""
        try:
            return question()
        except WebserverError:
            return default

    # --- the pump run --------------------------------------------------------------------------
    def pump_pid(self, timeout_s: float = 180.0) -> int:
        """The pid of the run worker executing the pump now: the last one found while its run is
        still STARTED and its process alive, otherwise the next pump run's, waited for up to
        ``timeout_s`` (between two runs, or before the sensor's first)."""
        return self.pump_run(timeout_s).pid

    def pump_run(self, timeout_s: float = 180.0) -> PumpRun:
        """The pump run executing now (see ``pump_pid``); StackError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            self._check_running()
            found = self._find()
            if found is not None:
                return found
            if time.monotonic() >= deadline:
                raise StackError(f"no pump run executing within {timeout_s:.0f} s (runs seen: "
                                 f"{[r.run_id for r in self.runs]}); see {self.log}")
            time.sleep(POLL_S)

    def _find(self) -> PumpRun | None:
        started = self._ask(self._web.pump_runs_started, None)
        if not started:
            return None
        run_id, start_time = started[0]
        last = self.runs[-1] if self.runs else None
        if last is not None and last.run_id == run_id:
            return last if alive(last.pid) else None
        pid = self._ask(lambda: self._web.run_worker_pid(run_id), None)
        if pid is None or not alive(pid) or not self._pump_beat_from(pid, start_time):
            return None
        run = PumpRun(run_id, pid, start_time)
        with self._cpu_lock:
            if last is not None:           # the previous run's CPU stays in the total
                self._cpu_done += self._cpu_last.get(last.pid, 0.0)
            self._cpu_last[pid] = tree_cpu_seconds(pid)
            self.runs.append(run)
        return run

    def _pump_beat_from(self, pid: int, since: float) -> bool:
        """The pump's heartbeat in msgx's PostgreSQL names ``pid`` and was started after ``since``:
        that process's pump has taken the writer lock and is in its loop."""
        with psycopg.connect(self._dsn, autocommit=True) as conn:
            row = conn.execute("SELECT pid, started_at FROM heartbeat WHERE component = 'pump'").fetchone()
        if row is None or row[0] != pid or row[1] is None:
            return False
        started_at: datetime = row[1]
        return started_at.timestamp() >= since - 1.0     # the database's clock and Dagster's: one host

    # --- CPU over every pump run -----------------------------------------------------------------
    def cpu_seconds(self) -> float:
        """CPU seconds (user + system) of every pump run's process tree since the stack started:
        the runs that ended, as last read (at most ``CPU_EVERY_S`` before they exited), plus the
        current one now. Counts from the first run found (``pump_pid``)."""
        with self._cpu_lock:
            current = self.runs[-1].pid if self.runs else None
            if current is not None and alive(current):
                self._cpu_last[current] = tree_cpu_seconds(current)
            return self._cpu_done + (self._cpu_last.get(current, 0.0) if current is not None else 0.0)

    def _watch_cpu(self) -> None:
        """Read the current run's tree CPU every ``CPU_EVERY_S``, so an ending run's last reading is recent."""
        while not self._cpu_stop.wait(CPU_EVERY_S):
            with self._cpu_lock:
                if self.runs and alive(self.runs[-1].pid):
                    self._cpu_last[self.runs[-1].pid] = tree_cpu_seconds(self.runs[-1].pid)

    # --- stop ----------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop Dagster as ``msgx demo`` does on Ctrl-C (see the module doc); then kill, one by one,
        any process seen under ``dagster dev`` that is still alive (``leftovers``: normally none)."""
        self._cpu_stop.set()
        if self._cpu_thread.is_alive():
            self._cpu_thread.join(5)
        proc = self.proc
        if proc is None:
            return
        seen: dict[int, int | None] = {}

        def look() -> None:
            for pid in descendants(proc.pid):
                if pid != proc.pid:
                    seen.setdefault(pid, started_at(pid))

        if proc.poll() is None:
            look()
            frozen = freeze_daemon(proc.pid)
            try:
                self._web.terminate_all(RUNS_STOP_S)
            except WebserverError:
                pass                               # the group is killed below anyway
            look()
            stop_dev(proc, frozen)
        else:
            proc.wait()
        if self._log_file is not None:
            self._log_file.close()
        for pid, start in sorted(seen.items()):
            if alive(pid) and start is not None and started_at(pid) == start:
                try:
                    os.kill(pid, signal.SIGKILL)
                    self.leftovers.append(pid)
                except ProcessLookupError:
                    pass
