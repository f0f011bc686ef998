"""The stall causes that need a real pump process (OPS-2): a `msgx pump` killed with SIGKILL and
not relaunched, and pump runs that fail as they start. The engine's pipeline_liveness check names
each cause; a pump that is running, or just gone between two runs, is not flagged."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy import text

from msgx_engine.mailbox.lock import MailboxLock
from msgx_engine.monitor.figures import figures
from tests.builders import gtdt
from tests.conftest import MSGX_BIN


def wait_until(predicate: Callable[[], bool], deadline_s: float, what: str) -> None:
    deadline = time.monotonic() + deadline_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def put_aged(app, n: int, age_s: float) -> None:
    stamp = (datetime.now() - timedelta(seconds=age_s)).replace(microsecond=0)
    for i in range(n):
        app.mailbox.put(gtdt(f"K{i}", (1, "A1")), received_at=stamp)


def looping(app) -> bool:
    """The pump holds its lock and has beaten in its loop (not only at its start)."""
    f = figures(app.engine)
    beat = f.heartbeat("pump")
    return f.pump_lock_held and beat is not None and beat.started_at is not None and beat.beat_at > beat.started_at


def test_a_killed_pump_not_relaunched_fails_once_its_heartbeat_is_stale(app, env_for):
    pump = subprocess.Popen([MSGX_BIN, "pump", "--idle-for", "300"], env=env_for(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: looping(app), 45, "the pump's first loop heartbeat")
        put_aged(app, 3, 95)
        alive = app.check("pipeline_liveness")
        assert alive.passed, alive.summary                      # alive (and processing them)
        wait_until(lambda: (lambda f: f.unregistered_rows == f.open_messages == 0)(figures(app.engine, app.mailbox)),
                   60, "the pump to process the rows")
    finally:
        os.kill(pump.pid, signal.SIGKILL)
        pump.wait(timeout=30)
    wait_until(lambda: not figures(app.engine).pump_lock_held, 30, "PostgreSQL to free the dead pump's lock")
    put_aged(app, 4, 95)
    just_gone = app.check("pipeline_liveness")
    assert just_gone.passed, just_gone.summary                  # its last beat is recent: maybe between runs
    with app.engine.begin() as conn:                             # a minute and more passes without a pump
        conn.execute(text("UPDATE heartbeat SET started_at = started_at - interval '80 seconds', "
                          "beat_at = beat_at - interval '80 seconds'"))
    r = app.check("pipeline_liveness")
    assert not r.passed, r.summary
    assert "4 mailbox row(s) wait to be registered" in r.summary and "no pump is running (last heartbeat" in r.summary


def test_pump_runs_failing_as_they_start_fail_the_check(app, env_for, settings):
    """Another installation holds the mailbox lock: each `msgx pump` takes the writer lock, beats
    once and exits 3 before processing anything."""
    put_aged(app, 2, 95)
    other = MailboxLock(settings.mailbox_url or "")
    other.acquire()
    try:
        for _ in range(2):
            run = subprocess.run([MSGX_BIN, "pump", "--drain"], env=env_for(), capture_output=True, text=True,
                                 timeout=60)
            assert run.returncode == 3, run.stderr
    finally:
        other.dispose()
    r = app.check("pipeline_liveness")
    assert not r.passed, r.summary
    assert "stopped before it began processing (pump runs fail as they start)" in r.summary
