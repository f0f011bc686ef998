"""The warm standby rehearsed on loopback (OPS-1: the interface survives the loss of its host; T11).

Two "hosts" of one installation, each a set of processes started with deploy/compose.yaml's
commands in folders of their own (tests/e2e/test_topology.py's machinery): the active one runs the
code server and the Dagster daemon, the warm standby its code server only. Every daemon start goes
through the fence of the daemon unit (deploy/systemd/msgx-daemon.service's ExecStartPre), and the
standby follows docs/deployment.md ("Active and standby"): `check` until the active host is gone,
then the daemon (its ExecStartPre takes the daemon over). Both hosts are this machine, so each
names itself with `--node`; the limit is the lowest accepted, 60 s, to keep the test short.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from collections.abc import Iterator

import dagster as dg
import psutil
import pytest
from sqlalchemy import text

from tests.topology_support import (
    BACK_WITHIN_S,
    REPO,
    START_DEADLINE_S,
    Topology,
    assert_each_once,
    installation,
    put,
)

pytestmark = pytest.mark.slow

STALE_AFTER_S = 60          # the lowest limit the command accepts (two missed daemon beats)
UNIT = REPO / "deploy" / "systemd" / "msgx-daemon.service"


def fence(topology: Topology, node: str, command: str = "takeover") -> subprocess.CompletedProcess[str]:
    """The daemon unit's ExecStartPre as written (the installed virtualenv's python is this one),
    with this host's name and the test's limit; ``command`` check is the operator's look first."""
    [line] = [ln.split("=", 1)[1] for ln in UNIT.read_text("utf-8").splitlines() if ln.startswith("ExecStartPre=")]
    argv = shlex.split(line)
    argv[0] = sys.executable
    argv[argv.index("takeover")] = command
    return subprocess.run([*argv, "--node", node, "--stale-after", str(STALE_AFTER_S)], env=topology.env,
                          capture_output=True, text=True, timeout=120)


def assert_refused(fenced: subprocess.CompletedProcess[str], holder: str, node: str) -> None:
    """The fence refused (exit 1) and said why: whose daemon beats, and that this host stays the standby."""
    assert fenced.returncode == 1, fenced.stdout + fenced.stderr
    assert f"refused: the Dagster daemon on {holder} beat" in fenced.stderr
    assert f"({node}) stays the standby" in fenced.stderr


def start_daemon(topology: Topology, node: str) -> None:
    """`systemctl start msgx-daemon.service` on ``node``: the fence, then the daemon."""
    fenced = fence(topology, node)
    assert fenced.returncode == 0, fenced.stdout + fenced.stderr
    topology.start("daemon")


def gone_within(standby: Topology, deadline_s: float) -> str:
    """The operator's `check` on the standby, asked every few seconds (each start imports Dagster)
    until it says the active host is gone; what it said."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        checked = fence(standby, "standby", "check")
        if checked.returncode == 0:
            return checked.stdout
        assert checked.returncode == 1 and checked.stderr.startswith("refused: "), checked.stderr
        time.sleep(3)
    pytest.fail(f"the standby's check still refuses after {deadline_s:.0f} s: {checked.stderr}")


def processed(topology: Topology) -> bool:
    """Every mailbox id put so far has ended SUCCEEDED."""
    with topology.state() as conn:
        done = {int(i) for (i,) in conn.execute(text("SELECT msg_id FROM proc_state_hst WHERE status = 'SUCCEEDED'"))}
    return set(topology.sent) <= done


def daemon_beats_since(topology: Topology, since: float) -> bool:
    """A daemon heartbeat newer than ``since`` (a monotonic time of this process)."""
    with topology.instance() as instance:
        beats = instance.get_daemon_heartbeats().values()
    return any(b.timestamp > time.time() - (time.monotonic() - since) for b in beats)


def daemon_beats(topology: Topology) -> bool:
    with topology.instance() as instance:
        return bool(instance.get_daemon_heartbeats())


@pytest.fixture
def hosts(pg_dbs, mysql_dbs, tmp_path_factory) -> Iterator[tuple[Topology, Topology]]:
    with installation(pg_dbs, mysql_dbs) as site:
        active, standby = (site.host(tmp_path_factory.mktemp(name)) for name in ("active", "standby"))
        try:
            for host in (active, standby):
                host.start("codeserver")
            for host in (active, standby):
                host.wait("the code server answers", host.code_server_answers, START_DEADLINE_S)
            yield active, standby
        finally:
            active.stop_all()
            standby.stop_all()


def test_the_standby_takes_over_within_a_minute_of_its_start_after_the_active_host_dies(hosts):
    """OPS-1: with the active host processing, a standby's daemon refuses to start and names the live
    daemon; then every process of the active host is killed at once (host death: nothing is left to
    report its runs), the standby's `check` says the active host is gone once both heartbeats are past
    the limit, its daemon starts through the fence, and a pump processes again within 60 s of that
    start: the messages put while no host ran are processed and delivered, every message once. The
    old host's daemon, coming back, refuses while the standby's daemon beats, naming it."""
    active, standby = hosts
    start_daemon(active, "active")
    put(active, "S1")
    before = active.wait("a pump run holds the writer lock", active.running_pump, START_DEADLINE_S)
    assert_each_once(active)
    active.wait("the daemon beats", lambda: daemon_beats(active), START_DEADLINE_S)

    assert_refused(fence(standby, "standby"), holder="active", node="standby")

    tree = [psutil.Process(p.pid) for p in active.procs.values()]
    tree += [child for p in list(tree) for child in p.children(recursive=True)]
    for process in tree:                      # host death: everything at once, SIGKILL
        process.kill()
    psutil.wait_procs(tree, timeout=10)
    for proc in active.procs.values():
        proc.wait(10)
    active.procs.clear()
    put(active, "S2", "S3")

    gone = gone_within(standby, STALE_AFTER_S * 3)
    assert "no live daemon or pump" in gone and "standby may run the daemon" in gone
    started_at = time.monotonic()
    start_daemon(standby, "standby")
    fenced = time.monotonic() - started_at
    standby.wait("the standby's daemon beats", lambda: daemon_beats_since(standby, started_at), BACK_WITHIN_S)
    beating = time.monotonic() - started_at
    standby.wait("every message put so far is processed", lambda: processed(standby), BACK_WITHIN_S)
    took = time.monotonic() - started_at
    print(f"standby: fence passed {fenced:.1f} s, daemon beating {beating:.1f} s, "
          f"processing again {took:.1f} s after the standby's start")
    assert took < BACK_WITHIN_S
    after = standby.running_pump()
    assert standby.run_status(before) == dg.DagsterRunStatus.FAILURE and after not in (None, before)
    assert_each_once(standby)

    assert_refused(fence(active, "active"), holder="standby", node="active")
