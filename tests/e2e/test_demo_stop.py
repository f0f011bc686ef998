"""Clean stop of `msgx demo` (README command 1): Ctrl-C on its process group stops the webserver,
the daemon, the code server, any run worker and the embedded PostgreSQL within 15 s, and says so,
quietly (no traceback) and leaving no run FAILED or still "running" in the history. The same demo
start also shows that the UI opens without the first-visit dialog and that the places the demo's
hints name exist in the installed Dagster."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from msgx_engine import embedded

BIN = Path(sys.executable).parent
STOP_WITHIN_S = 15.0           # the requirement itself
START_DEADLINE_S = 300.0       # a cold `dagster dev` on a busy 2-core machine
pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def wait_until(predicate, deadline_s: float, proc: subprocess.Popen) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            return False
        if predicate():
            return True
        time.sleep(0.5)
    return False


def pump_run_started(dagster_home: Path) -> bool:
    """The inbox sensor has launched pump_job and its run worker is executing it."""
    import dagster as dg

    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        return bool(instance.get_run_records(dg.RunsFilter(job_name="pump_job",
                                                           statuses=[dg.DagsterRunStatus.STARTED]), limit=1))


def graphql(port: int, query: str) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": query}).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())["data"]


def run_statuses(home: Path) -> list[tuple[str, str]]:
    """(job, status) of every run in the demo's instance; starts the embedded server to read them."""
    import dagster as dg

    embedded.start(home)
    try:
        with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
            return [(r.job_name, r.status.value) for r in instance.get_runs()]
    finally:
        embedded.stop(home)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_stops_dagster_and_the_embedded_postgres(sig):
    """SIGINT (Ctrl-C) or SIGTERM to the demo's process group, once the webserver answers and a pump
    run is executing: within 15 s no process the demo started is left (webserver, daemon, code
    server, run worker, `dagster dev`, msgx itself) and the embedded PostgreSQL is stopped; the
    output says what was stopped, in a few lines without a traceback; every run of the history
    ended CANCELED or SUCCESS (none FAILURE, none left queued or running). Before the stop: the
    webserver does not show the first-visit dialog (`shouldShowNux` false) and each page the
    printed hints link to is served."""
    home = Path(tempfile.mkdtemp(prefix="msgx-stop-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MSGX_", "DAGSTER_"))}
    env["MSGX_HOME"] = str(home)
    port = free_port()
    log = home / "demo.out"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(BIN / "msgx"), "demo", "--port", str(port)], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, cwd=home)
    try:
        assert wait_until(lambda: answers(port), START_DEADLINE_S, proc), log.read_text()[-3000:]
        assert wait_until(lambda: pump_run_started(home / "dagster"), START_DEADLINE_S, proc), \
            log.read_text()[-3000:]
        postgres = embedded.running_pid(home)
        started = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        assert postgres is not None and len(started) >= 3     # dagster dev, webserver, daemon, ...

        assert graphql(port, "{ shouldShowNux }") == {"shouldShowNux": False}
        hinted = re.findall(rf"http://127\.0\.0\.1:{port}(/[a-z-]+)", log.read_text())
        assert {"/runs", "/asset-groups", "/automation", "/assets"} <= set(hinted), log.read_text()[-3000:]
        for path in hinted:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as page:
                assert page.status == 200 and b"<html" in page.read(2000).lower()

        before = log.stat().st_size
        t0 = time.monotonic()
        os.killpg(proc.pid, sig)
        proc.wait(timeout=STOP_WITHIN_S)
        left = [pid for pid in started if alive(pid)]
        while (left or alive(postgres)) and time.monotonic() - t0 < STOP_WITHIN_S:
            time.sleep(0.2)
            left = [pid for pid in started if alive(pid)]
        assert left == [] and not alive(postgres), f"still running: {left}, postgres {alive(postgres)}"
        assert proc.returncode == 0
        text = log.read_text()
        assert "stopping Dagster" in text and "embedded PostgreSQL stopped" in text
        assert "stopped: webserver, daemon, run workers and the embedded PostgreSQL are gone" in text
        stopping = text[before:]
        assert "Traceback" not in stopping and "Stack Trace" not in stopping, stopping[-4000:]
        assert len(stopping.splitlines()) <= 60, stopping[-4000:]
        runs = run_statuses(home)
        assert ("pump_job", "CANCELED") in runs or ("pump_job", "SUCCESS") in runs, runs
        assert all(status in ("CANCELED", "SUCCESS") for _, status in runs), runs
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        embedded.stop(home)
        subprocess.run(["rm", "-rf", str(home)], check=False)
