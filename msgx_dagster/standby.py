"""A warm standby's fence: may this host start the Dagster daemon?

Dagster allows one daemon per instance. A warm standby host runs msgx's code server, webservers and
``msgx serve`` all the time, but its daemon (the sensors that start the pump, the schedules) only
when the active host is gone. The daemon unit runs ``python -m msgx_dagster.standby takeover`` as
its ``ExecStartPre``; an operator asks ``... standby check`` first (docs/deployment.md, "Active and
standby").

The active host counts as gone when both of its signs of life are older than the limit
(``--stale-after``, 120 s by default): the newest heartbeat of any Dagster daemon in the instance
(a daemon beats every 30 s) and msgx's pump heartbeat (every ~10 s while a pump runs). While either
is fresh the command refuses (exit 1) and says whose heartbeat it saw, how old, and what to do.

Which host was last handed the daemon is recorded in msgx's own database (``heartbeat`` row
``dagster-daemon``), so a daemon that restarts on its own host is not kept out by its own recent
heartbeat, while a second standby, or the old active host coming back, is. ``takeover`` hands the
daemon over with one compare-and-set: of two standbys taking over from the same sighting, one wins.
The pump itself stays fenced by what it already holds, the PostgreSQL writer lock and the mailbox
lock: a second pump exits at once whatever started it.

Exit status: 0 this host may run the daemon (``takeover``: it now does), 1 refused with the reason,
2 the instance or msgx's database cannot be read (refused: nothing is known).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from dataclasses import dataclass

import dagster as dg
from sqlalchemy.exc import SQLAlchemyError

from msgx_engine.config import ConfigError, Settings
from msgx_engine.db import make_engine
from msgx_engine.mailbox.lock import MailboxLock
from msgx_engine.redact import safe_text
from msgx_engine.store import locks, monitoring

CLAIM = "dagster-daemon"          # msgx's heartbeat row naming the host handed the daemon
STALE_AFTER_S = 120.0             # four missed daemon beats (every 30 s), twelve pump beats (every ~10 s)
MIN_STALE_AFTER_S = 60.0          # two missed daemon beats: below that a live daemon looks dead


@dataclass(frozen=True)
class Sighting:
    """What the shared databases say about the hosts, ages in seconds (None: never seen)."""
    daemon_age_s: float | None            # the newest heartbeat of any Dagster daemon of the instance
    pump_age_s: float | None              # msgx's pump heartbeat
    pump_host: str | None
    claimed_by: str | None                # the host last handed the daemon


def judge(seen: Sighting, node: str, stale_after_s: float = STALE_AFTER_S) -> tuple[bool, str]:
    """May ``node`` run the daemon? (allowed, the reason in the operator's words)."""
    holder = seen.claimed_by or "another host"
    if seen.daemon_age_s is not None and seen.daemon_age_s < stale_after_s:
        if seen.claimed_by == node:
            return True, (f"this host ({node}) runs the Dagster daemon; its last heartbeat is "
                          f"{seen.daemon_age_s:.0f} s old: a restart here")
        return False, (f"the Dagster daemon on {holder} beat {seen.daemon_age_s:.0f} s ago (the limit is "
                       f"{stale_after_s:.0f} s): that host is alive and this one ({node}) stays the standby; "
                       "one instance runs one daemon. If that host is really gone, wait until its heartbeat "
                       f"is older than the limit; if it is not, stop its daemon there first")
    if seen.pump_age_s is not None and seen.pump_age_s < stale_after_s and seen.pump_host != node:
        return False, (f"a pump on {seen.pump_host or 'another host'} beat {seen.pump_age_s:.0f} s ago (the limit "
                       f"is {stale_after_s:.0f} s): the active host still processes, this one ({node}) stays "
                       "the standby")

    def age(value: float | None) -> str:
        return "none ever" if value is None else f"{value:.0f} s old"
    return True, (f"no live daemon or pump: the last daemon heartbeat is {age(seen.daemon_age_s)}, the last pump "
                  f"heartbeat {age(seen.pump_age_s)} (limit {stale_after_s:.0f} s); {node} may run the daemon")


def newest_daemon_age_s(instance: dg.DagsterInstance) -> float | None:
    """Age of the newest heartbeat of any daemon type (each running daemon beats every 30 s). The
    daemons' clocks and this host's must agree (NTP), as Dagster's own liveness check assumes."""
    beats = instance.get_daemon_heartbeats()
    if not beats:
        return None
    return max(0.0, time.time() - max(beat.timestamp for beat in beats.values()))


def run(command: str, node: str, stale_after_s: float) -> tuple[int, str]:
    """Read both databases, judge, and for ``takeover`` claim the daemon; (exit status, message)."""
    try:
        settings = Settings.from_env()
        if settings.db_url is None:
            return 2, "MSGX_DB_URL is not set: cannot tell whether another host runs the daemon"
        with dg.DagsterInstance.get() as instance:
            daemon_age = newest_daemon_age_s(instance)
        engine = make_engine(settings.db_url, single=True)
        try:
            with engine.begin() as conn:
                now = monitoring.database_now(conn)
                beats = {b.component: b for b in monitoring.heartbeats(conn)}
                pump, claimed = beats.get(monitoring.PUMP), beats.get(CLAIM)
                seen = Sighting(daemon_age, None if pump is None else (now - pump.beat_at).total_seconds(),
                                None if pump is None else pump.host, None if claimed is None else claimed.host)
                allowed, reason = judge(seen, node, stale_after_s)
                if not allowed:
                    return 1, f"refused: {reason}"
                if command == "check":
                    return 0, reason
                from_another = not (claimed is not None and claimed.host == node)
                if from_another and not monitoring.claim(conn, CLAIM, host=node, pid=os.getpid(), seen=claimed):
                    return 1, ("refused: another host took the daemon over at this very moment; "
                               f"this one ({node}) stays the standby")
                # a dead host's sessions only: a daemon restarting on its own host leaves its pump be
                dead_pump = from_another and pump is not None and (seen.pump_age_s or 0) >= stale_after_s
                ended = monitoring.end_lock_holder(conn, locks.PUMP) if dead_pump else None
        finally:
            engine.dispose()
        released = [] if ended is None else [f"ended the dead pump's database session (server pid {ended})"]
        if dead_pump and pump is not None and settings.mailbox_url:
            released += mailbox_lock_released(settings.mailbox_url, f"msgx pump {pump.host} pid {pump.pid}")
    except (ConfigError, SQLAlchemyError, dg.DagsterError) as exc:
        return 2, f"cannot read the Dagster instance or msgx's database: {type(exc).__name__}: {safe_text(exc)}"
    return 0, "; ".join([f"takeover: {reason}; the daemon is handed to {node}", *released])


def mailbox_lock_released(url: str, label: str) -> list[str]:
    """End the dead pump's mailbox session if the server still holds the lock for it (what was done,
    for the message). A holder that cannot be recognised as that pump is left to the operator."""
    lock = MailboxLock(url)
    try:
        found = lock.end_holder(label)
    finally:
        lock.dispose()
    if found is None:
        return []
    holder, ended = found
    if ended:
        return [f"ended the dead pump's mailbox session ({holder})"]
    return [f"the mailbox lock is held by {holder}, not recognisably the dead pump: left alone (if it is the "
            "dead host's, end that connection on the mailbox server, docs/deployment.md)"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m msgx_dagster.standby",
                                     description="May this host start the Dagster daemon? (warm standby)")
    parser.add_argument("command", choices=["check", "takeover"],
                        help="check: say whether the active host is gone; takeover: the same, then hand the "
                             "daemon to this host (the daemon unit's ExecStartPre)")
    parser.add_argument("--stale-after", type=float, default=STALE_AFTER_S, metavar="SECONDS",
                        help=f"how old both heartbeats must be before the active host counts as gone "
                             f"(default {STALE_AFTER_S:.0f}, at least {MIN_STALE_AFTER_S:.0f})")
    parser.add_argument("--node", default=socket.gethostname(),
                        help="this host's name as recorded in the claim (default: the host name)")
    args = parser.parse_args(argv)
    if args.stale_after < MIN_STALE_AFTER_S:
        parser.error(f"--stale-after must be at least {MIN_STALE_AFTER_S:.0f} s: a live daemon beats every 30 s")
    status, message = run(args.command, args.node, args.stale_after)
    print(message, file=sys.stderr if status else sys.stdout)
    return status


if __name__ == "__main__":
    sys.exit(main())
