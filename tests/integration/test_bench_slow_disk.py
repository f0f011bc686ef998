"""``bench/slow_disk.py``: the latency figures on a slow disk can be taken on any machine.

The wrapper must hand the command a PostgreSQL that really runs with the flush-slowing library,
pass the command's exit status through, and leave no cluster or folder behind. No timing is
asserted: the library's presence in the server's memory map proves the emulation is on.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import pytest

from tests.conftest import PG_ADMIN
from tests.private_servers import PG_BIN

REPO = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent("""
    import json, os, sys
    import psycopg
    with psycopg.connect(os.environ["MSGX_TEST_PG"]) as conn:
        pid, data, autovacuum = conn.execute(
            "SELECT pg_backend_pid(), current_setting('data_directory'), current_setting('autovacuum')").fetchone()
        conn.execute("CREATE TABLE probe (n int)")
        conn.execute("INSERT INTO probe VALUES (1)")
        conn.commit()
        maps = open(f"/proc/{pid}/maps").read()    # while the backend lives: an exiting one maps nothing
    print(json.dumps({"dsn": os.environ["MSGX_TEST_PG"], "data": data, "autovacuum": autovacuum,
                      "preloaded": "slow_sync.so" in maps}))
    sys.exit(3)
""")


@pytest.mark.skipif(PG_BIN is None, reason="needs PostgreSQL's initdb and pg_ctl")
def test_slow_disk_runs_the_command_on_a_slowed_private_cluster_and_removes_it() -> None:
    """The command sees a private cluster with the library
    preloaded and the shared server's autovacuum setting; its exit status comes back; the cluster
    is stopped and its folder removed afterwards."""
    done = subprocess.run([sys.executable, "bench/slow_disk.py", "--flush-ms", "1", "--", sys.executable, "-c", PROBE],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stderr
    first, probe_line = done.stdout.splitlines()[:2]
    assert first.startswith("slow disk: a commit takes ") and "1 ms slower flush" in first
    probe = json.loads(probe_line)
    assert probe["preloaded"] is True
    with psycopg.connect(PG_ADMIN) as shared:
        assert probe["autovacuum"] == shared.execute("SHOW autovacuum").fetchone()[0]
    assert probe["dsn"] != PG_ADMIN
    assert not Path(probe["data"]).exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(probe["dsn"], connect_timeout=2).close()


def test_slow_disk_refuses_a_missing_command() -> None:
    """Bad input gets a clear error, not a cluster started for nothing."""
    done = subprocess.run([sys.executable, "bench/slow_disk.py", "--flush-ms", "4"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "give the command to run after --" in done.stderr


WAITER = textwrap.dedent("""
    import json, os, time
    import psycopg
    with psycopg.connect(os.environ["MSGX_TEST_PG"]) as conn:
        data = conn.execute("SELECT current_setting('data_directory')").fetchone()[0]
    print(json.dumps({"dsn": os.environ["MSGX_TEST_PG"], "data": data}), flush=True)
    time.sleep(120)
""")


@pytest.mark.skipif(PG_BIN is None, reason="needs PostgreSQL's initdb and pg_ctl")
def test_slow_disk_terminated_still_stops_its_cluster() -> None:
    """A benchmark run stopped with SIGTERM (a timeout, an impatient operator) leaves no cluster
    running and no folder behind, and the command is stopped with it."""
    proc = subprocess.Popen([sys.executable, "bench/slow_disk.py", "--flush-ms", "1", "--", sys.executable, "-c",
                             WAITER], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("slow disk: a commit takes ")
        probe = json.loads(proc.stdout.readline())
        proc.terminate()
        assert proc.wait(timeout=60) == 143
    finally:
        proc.kill()
        proc.wait()
    assert not Path(probe["data"]).exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(probe["dsn"], connect_timeout=2).close()
