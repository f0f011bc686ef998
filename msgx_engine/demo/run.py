"""``msgx demo``: a fresh airport day in the embedded default, processed under Dagster.

Every start recreates the demo's state and mailbox databases in the embedded PostgreSQL and
loads the day from ``demo.day`` (the Dagster database is kept, so run history accumulates).
Then either

- headless: ``dagster job execute ... -j pump_job`` against the demo's instance, so the run is
  recorded in its PostgreSQL run storage like any other; then the summary; or
- interactive: ``dagster dev`` (webserver, daemon, code server, run workers) in a process group
  of its own, until Ctrl-C or SIGTERM. Then, quietly (interrupting every process of the group
  would print a traceback from each, and leave the long-lived runs FAILED): the daemon is frozen
  (SIGSTOP) so that no sensor or schedule starts a run meanwhile; the runs still queued or in
  flight are terminated through the webserver, as the UI's Terminate button does, and end on
  their own (CANCELED, or SUCCESS for the looping ops, which stop at their next step);
  ``dagster dev`` is interrupted, what is left of its group after a short grace is killed (it
  holds nothing: the run history is in PostgreSQL); the embedded PostgreSQL is stopped; the demo
  says what it stopped.

The day is generated for the current time: flights still to come have no actual times yet. One
of its messages fails on purpose (``demo.fault``): the printed hints say how to fix it and replay it.

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
from datetime import datetime
from pathlib import Path

from msgx_engine import embedded
from msgx_engine.app import App
from msgx_engine.config import ConfigError, Settings
from msgx_engine.db import make_engine
from msgx_engine.demo import fault, instance, summary
from msgx_engine.demo.day import DEFAULT_SEED, DemoDay, demo_day
from msgx_engine.demo.webserver import Webserver, WebserverError
from msgx_engine.sis.times import LOCAL_TZ
from msgx_engine.store import migrate

STOP_GRACE_S = 8.0                       # Dagster's own shutdown; then its group is killed
RUNS_STOP_S = 7.0                        # the runs' own stop; then those still going are marked CANCELED
DEV_GRACE_S = 3.0                        # once the runs have ended: the daemon's own stop, then the rest is killed
PROCESS_POLL_S = 0.2


def local_now() -> datetime:
    """Now where the AODB is, as the naive local time SIS messages carry: its date decides a
    DNLD's day (D4, a DNLD's day), its time which flights have flown."""
    return datetime.now(LOCAL_TZ).replace(tzinfo=None)


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
        now = local_now().replace(second=0, microsecond=0)     # printed as HH:MM: the same day again from it
        day = demo_day(now.date(), self.seed, now=now)
        app = App.from_settings(self.settings)
        try:
            migrate.upgrade(app.engine)
            if day.fault is not None:
                fault.install(app.engine, day.fault)
            app.mailbox.init()
            ids = app.mailbox.put_many(m.body for m in day.messages)
        finally:
            app.dispose()
        _say(f"state and mailbox in the embedded PostgreSQL under {self.home} (recreated)")
        _say(f"loaded the day {day.day.isoformat()} as of {now:%H:%M} (flights after that have not flown yet): "
             f"{len(ids)} messages (mailbox ids {ids[0]}..{ids[-1]}): "
             f"{day.describe()}")
        instance.write_instance(self.dagster_home, self.server.url(embedded.DAGSTER_DB, instance.STORAGE_DRIVER))
        if day.fault is not None:
            self.fault_hints(day, ids[day.fault.index])
        return day

    def fault_hints(self, day: DemoDay, msg_id: int) -> None:
        """The rehearsal: which message will fail, why, and the operator's three steps."""
        assert day.fault is not None
        env = f"MSGX_HOME={self.home} MSGX_EMBEDDED=1"
        msgx = _executable("msgx")
        _say(f"one failure to rehearse: the cancellation of flight {day.fault.flno} (FLID {day.fault.flid}, "
             f"mailbox id {msg_id}) is refused by the demo's state database; it is retried for about 15 s, "
             "then it is a dead letter, DEAD(exhausted). To handle it:")
        _say(f"  1. look at it:  {env} {msgx} replay --ids {msg_id}")
        _say(f"  2. fix the cause (drops the refusal):  MSGX_HOME={self.home} {msgx} demo --fix-fault")
        _say(f"  3. replay it:   {env} {msgx} replay --ids {msg_id} --apply --operator YOUR_NAME "
             "--reason 'database refusal fixed'")
        _say("     under Dagster the inbox sensor then starts a pump run that cancels the flight; after "
             f"--headless run it yourself: {env} {msgx} pump --drain")

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
            ui = f"http://127.0.0.1:{port}"
            _say(f"Dagster on {ui} (DAGSTER_HOME={self.dagster_home}, runs kept in PostgreSQL)")
            _say("the inbox sensor starts pump_job within seconds. In the left-hand menu: Runs "
                 f"({ui}/runs) to watch it drain the day, Lineage ({ui}/asset-groups) for the asset graph "
                 f"and its checks, Automation ({ui}/automation) for the sensors and schedules, Catalog "
                 f"({ui}/assets) for each asset's events. Ctrl-C stops everything.")
            while proc.poll() is None and not stop.wait(PROCESS_POLL_S):
                pass
            if proc.poll() is None:
                _say(f"{received[0] if received else 'stop'}: stopping Dagster (runs, webserver, daemon, code server)")
                frozen = freeze_daemon(proc.pid)
                try:
                    self.stop_runs(Webserver(port))
                finally:
                    stop_dev(proc, frozen)
                _say("Dagster stopped")
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

    @staticmethod
    def stop_runs(web: Webserver) -> None:
        """Terminate the queued and in-flight runs through the webserver, so they end CANCELED."""
        try:
            asked, left = web.terminate_all(RUNS_STOP_S)
        except WebserverError as exc:
            _say(f"runs not terminated (the webserver did not answer: {exc})")
            return
        if asked:
            names = ", ".join(sorted({r.job for r in asked}))
            _say(f"terminated {len(asked)} run(s) ({names})"
                 + (f"; {len(left)} not yet stopped marked CANCELED" if left else ""))


def freeze_daemon(pgid: int) -> list[int]:
    """SIGSTOP the Dagster daemon of ``dagster dev``'s group: while the runs are terminated, no
    sensor tick, schedule or run queue may start another one (the inbox sensor would start a
    pump as soon as the last one ended). Returns the frozen pids (none where /proc is missing)."""
    frozen = [pid for pid, cmdline in _group_processes(pgid) if "dagster._daemon" in cmdline]
    for pid in frozen:
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            pass
    return frozen


def stop_dev(proc: subprocess.Popen, frozen: list[int], grace_s: float = DEV_GRACE_S) -> bool:
    """Once the runs have ended: interrupt ``dagster dev`` alone (it asks its webserver and
    daemon to stop through their shutdown pipes, without the traceback each process prints when
    the whole group is interrupted) and kill the frozen daemon, which must start nothing more.
    The webserver and the code server take several seconds to wind down and hold nothing worth
    waiting for (the run history is in PostgreSQL), so whatever is left after ``grace_s`` is
    killed, silently. Returns whether it all ended within the grace period."""
    try:
        os.kill(proc.pid, signal.SIGINT)
    except ProcessLookupError:
        pass
    for pid in frozen:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return stop_group(proc, grace_s, interrupt=False)


def stop_group(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S, *, interrupt: bool = True) -> bool:
    """Interrupt a process group like Ctrl-C would (unless ``interrupt`` is False: it was asked to
    stop already), kill what is left after ``grace_s``; returns whether it ended within the grace
    period."""
    pgid = proc.pid                       # started with start_new_session: its pid is the group id
    if interrupt:
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


PROC = Path("/proc")


def _group_processes(pgid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the live processes of group ``pgid``, from /proc (empty without it).
    Zombies do not count: killed processes linger as zombies until init reaps them, which a
    container's init may do late."""
    found: list[tuple[int, str]] = []
    for stat in PROC.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()      # after "(comm)": state, ppid, pgrp, ...
            if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
                cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append((int(stat.parent.name), cmdline))
        except (OSError, IndexError, ValueError):
            continue                                               # gone meanwhile
    return found


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs (zombies aside, where /proc tells them apart)."""
    if PROC.is_dir():
        return bool(_group_processes(pgid))
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


def fix_fault(home: Path) -> int:
    """``msgx demo --fix-fault``: the operator's fix step of the rehearsed failure (``demo.fault``)."""
    server = embedded.start(home)
    engine = make_engine(server.url(embedded.STATE_DB))
    try:
        removed = fault.remove(engine)
    finally:
        engine.dispose()
    if removed:
        _say("fixed: the state database no longer refuses the cancellation; replay the dead letter now "
             "(msgx replay --ids ID --apply --operator NAME --reason TEXT)")
    else:
        _say("nothing to fix: the state database refuses nothing (already fixed, or no demo day loaded)")
    return 0
