"""``msgx demo``: a fresh airport day in the embedded default, processed under Dagster.

Every start recreates the demo's state and mailbox databases in the embedded PostgreSQL and
loads the day from ``demo.day`` (the Dagster database is kept, so run history accumulates).
Then either

- headless: ``dagster job execute ... -j pump_job`` against the demo's instance, so the run is
  recorded in its PostgreSQL run storage like any other; then the summary; or
- interactive: ``dagster dev`` (webserver, daemon, code server, run workers) in a process group
  of its own, until Ctrl-C or SIGTERM: then Dagster's group is interrupted (and killed if it
  lingers), the embedded PostgreSQL is stopped, and the demo says what it stopped.

Only the embedded default: the demo drops databases, so it refuses to run with
``MSGX_DB_URL``/``MSGX_MAILBOX_URL`` set.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from datetime import date, datetime
from pathlib import Path

from msgx_engine import embedded
from msgx_engine.app import App
from msgx_engine.config import ConfigError, Settings
from msgx_engine.demo import instance, summary
from msgx_engine.demo.day import DEFAULT_SEED, DemoDay, demo_day
from msgx_engine.sis.times import LOCAL_TZ
from msgx_engine.store import migrate

STOP_GRACE_S = 8.0                       # Dagster's own shutdown; then its group is killed
PROCESS_POLL_S = 0.2


def today() -> date:
    """Today where the AODB is: its local date decides a DNLD's day (D4)."""
    return datetime.now(LOCAL_TZ).date()


def _say(text: str) -> None:
    print(f"demo: {text}", flush=True)


def _executable(name: str) -> str:
    """A console script of this interpreter's environment (where `msgx` itself lives)."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else (shutil.which(name) or name)


class Demo:
    """One demo start: the embedded server, the loaded day, the Dagster instance."""

    def __init__(self, settings: Settings, seed: int = DEFAULT_SEED) -> None:
        if not settings.embedded:
            raise ConfigError("msgx demo runs on the embedded default only (it recreates its databases): "
                              "unset MSGX_DB_URL and MSGX_MAILBOX_URL")
        self.home = settings.home
        self.seed = seed
        self.server = embedded.start(self.home)
        self.settings = replace(settings, db_url=self.server.url(embedded.STATE_DB),
                                mailbox_url=self.server.url(embedded.MAILBOX_DB))
        self.dagster_home = self.home / "dagster"

    def load_day(self) -> DemoDay:
        """Fresh state and mailbox databases, the schema, the mailbox tables, the day's messages."""
        embedded.ensure_databases(self.server, (embedded.STATE_DB, embedded.MAILBOX_DB, embedded.DAGSTER_DB),
                                  fresh=(embedded.STATE_DB, embedded.MAILBOX_DB))
        day = demo_day(today(), self.seed)
        app = App.from_settings(self.settings)
        try:
            migrate.upgrade(app.engine)
            app.mailbox.init()
            ids = app.mailbox.put_many(m.body for m in day.messages)
        finally:
            app.dispose()
        _say(f"state and mailbox in the embedded PostgreSQL under {self.home} (recreated)")
        _say(f"loaded the day {day.day.isoformat()}: {len(ids)} messages (mailbox ids {ids[0]}..{ids[-1]}): "
             f"{day.describe()}")
        instance.write_instance(self.dagster_home, self.server.url(embedded.DAGSTER_DB, instance.STORAGE_DRIVER))
        return day

    def dagster_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("MSGX_DB_URL", "MSGX_MAILBOX_URL")}
        env.update(DAGSTER_HOME=str(self.dagster_home), MSGX_HOME=str(self.home), MSGX_EMBEDDED="1")
        return env

    # --- headless ----------------------------------------------------------------------------
    def headless(self, day: DemoDay) -> int:
        log_path = self.dagster_home / "headless-run.log"
        _say(f"running pump_job through Dagster (DAGSTER_HOME={self.dagster_home}; log {log_path})")
        t0 = time.monotonic()
        with open(log_path, "w", encoding="utf-8") as out:
            rc = subprocess.call([_executable("dagster"), "job", "execute", "-m", "msgx_dagster.definitions",
                                  "-j", "pump_job", "--tags", '{"msgx/demo": "headless"}'],
                                 env=self.dagster_env(), stdout=out, stderr=subprocess.STDOUT)
        seconds = time.monotonic() - t0
        if rc != 0:
            _say(f"pump_job failed (exit {rc}); the last lines of {log_path}:")
            print("".join(log_path.read_text("utf-8", errors="replace").splitlines(True)[-30:]))
            return 1
        app = App.from_settings(self.settings)
        try:
            done = summary.processed(app.engine)
            examples = summary.example_flights(app.engine, day.examples)
        finally:
            app.dispose()
        lines, ok = summary.report(day, done, run_seconds=seconds, examples=examples)
        print("\n" + "\n".join(lines))
        print(f"\nthe run is in the demo's Dagster instance: DAGSTER_HOME={self.dagster_home} "
              f"{_executable('dagster')} run list")
        print(f"the day's flights: MSGX_HOME={self.home} MSGX_EMBEDDED=1 {_executable('msgx')} flights")
        print(f"the embedded PostgreSQL keeps running for those; stop it: MSGX_HOME={self.home} "
              f"{_executable('msgx')} demo --stop")
        return 0 if ok else 1

    # --- interactive -------------------------------------------------------------------------
    def interactive(self, port: int) -> int:
        stop = threading.Event()
        received: list[str] = []

        def on_signal(signum: int, _frame: object) -> None:
            received.append(signal.Signals(signum).name)
            stop.set()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            proc = subprocess.Popen([_executable("dagster"), "dev", "-m", "msgx_dagster.definitions",
                                     "-h", "127.0.0.1", "-p", str(port)], env=self.dagster_env(),
                                    start_new_session=True)
            _say(f"Dagster on http://127.0.0.1:{port} (DAGSTER_HOME={self.dagster_home}, runs kept in PostgreSQL)")
            _say("the inbox sensor starts pump_job within seconds: open Runs to watch it drain the day, "
                 "Assets > Lineage for the graph, Overview > Sensors and Schedules. Ctrl-C stops everything.")
            while proc.poll() is None and not stop.wait(PROCESS_POLL_S):
                pass
            if proc.poll() is None:
                _say(f"{received[0] if received else 'stop'}: stopping Dagster (webserver, daemon, run workers)")
                stopped = stop_group(proc)
                _say("Dagster stopped" + ("" if stopped else " (killed after a grace period)"))
                rc = 0
            else:
                rc = proc.returncode
                _say(f"Dagster exited by itself (exit {rc})")
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            if embedded.stop(self.home):
                _say("embedded PostgreSQL stopped")
        _say("stopped: webserver, daemon, run workers and the embedded PostgreSQL are gone")
        return rc


def stop_group(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> bool:
    """Interrupt a process group like Ctrl-C would, kill what is left after ``grace_s``; returns
    whether it ended within the grace period."""
    pgid = proc.pid                       # started with start_new_session: its pid is the group id
    _signal_group(pgid, signal.SIGINT)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()
        if not _group_alive(pgid):
            return True
        time.sleep(PROCESS_POLL_S)
    _signal_group(pgid, signal.SIGKILL)
    proc.wait()
    while _group_alive(pgid):             # the kill is delivered; children are reaped by init
        time.sleep(PROCESS_POLL_S)
    return False


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run_demo(settings: Settings, *, headless: bool, port: int, seed: int | None = None) -> int:
    demo = Demo(settings, DEFAULT_SEED if seed is None else seed)
    day = demo.load_day()
    return demo.headless(day) if headless else demo.interactive(port)


def stop_embedded(home: Path) -> int:
    _say("embedded PostgreSQL stopped" if embedded.stop(home) else "no embedded PostgreSQL was running")
    return 0
