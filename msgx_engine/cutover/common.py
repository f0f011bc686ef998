"""What the three cut-over commands share: their outcome, the locks they hold, reading the other
installation's state database (read only), and the comparison of the two installations' flights.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from msgx_engine.app import App
from msgx_engine.compare.diff import Scope, compare
from msgx_engine.compare.rules import Rule, RulesError, load_rules
from msgx_engine.compare.run import live_since
from msgx_engine.compare.sources import SourceUnreadable, read_postgresql
from msgx_engine.db import make_engine
from msgx_engine.mailbox.lock import MailboxBusy, MailboxLock
from msgx_engine.redact import redact_urls
from msgx_engine.store import cutover_state, registration, version_floor
from msgx_engine.store.cutover_state import CutoverState
from msgx_engine.store.session_lock import LockBusy, SessionLock
from msgx_engine.store.version_floor import Published

log = logging.getLogger(__name__)

AFTER_WATERMARK = "changed by mailbox rows after the watermark: one installation has processed them, the other not"


class Refused(RuntimeError):
    """A precondition does not hold: nothing was changed (exit 2); the message is the reason."""


class Unfinished(RuntimeError):
    """The command did part of its work and must be run again (exit 1); the message says why."""


@dataclass
class Report:
    """What a command checked and did, line by line, and its audit row."""

    lines: list[str] = field(default_factory=list)
    audit_id: int | None = None

    def say(self, line: str) -> None:
        self.lines.append(line)
        log.info("cutover: %s", line)


def refuse_if(reason: str | None) -> None:
    if reason is not None:
        raise Refused(reason)


def lock(engine: Engine, key: int, holder: str, refusal: str) -> SessionLock:
    """An advisory lock of this installation, taken now or the command is refused."""
    held = SessionLock(engine, key, holder, LockBusy, refusal=refusal)
    try:
        held.acquire()
    except LockBusy as exc:
        raise Refused(str(exc)) from exc
    return held


def wait_for_lock(engine: Engine, key: int, holder: str, wait_s: float) -> SessionLock | None:
    """The lock once its holder let it go, polled until ``wait_s`` has passed (None: still held)."""
    held = SessionLock(engine, key, holder, LockBusy)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            held.acquire()
            return held
        except LockBusy:
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.2)


def mailbox_lock(url: str) -> MailboxLock:
    """The lock on the mailbox server that every production pump holds: free, or the command is
    refused naming its holder (a second installation holds the right, PRE-1)."""
    held = MailboxLock(url)
    try:
        held.acquire()
    except MailboxBusy as exc:
        held.dispose()
        raise Refused(f"another msgx installation's pump is processing the mailbox: {exc}") from exc
    except SQLAlchemyError as exc:
        held.dispose()
        raise Refused(f"the mailbox cannot be reached ({exc.__class__.__name__}): the hand-over needs it") from exc
    return held


@contextmanager
def mailbox_free(url: str, report: Report) -> Iterator[None]:
    """Held for the block: the mailbox lock, free (``mailbox_lock``), said in the report."""
    held = mailbox_lock(url)
    try:
        report.say("the mailbox lock is free: no installation processes the mailbox")
        yield
    finally:
        held.dispose()


@dataclass(frozen=True)
class OtherSide:
    """The other installation's state database, as read (read only)."""

    label: str
    state: CutoverState | None
    finished: list[int] = field(default_factory=list)
    registered: dict[int, datetime] = field(default_factory=dict)   # when they arrived there (L16, verdicts from the
                                                                    # mailbox)


@contextmanager
def read_only(url: str) -> Iterator[Connection]:
    """A connection to another state database in one read-only REPEATABLE READ transaction (the
    server refuses any write in it), ended without a commit."""
    engine = make_engine(url, single=True, program_name="msgx cutover")
    try:
        with engine.connect() as conn:
            conn.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
            try:
                yield conn
            finally:
                conn.rollback()
    finally:
        engine.dispose()


def read_other(url: str, *, finished_after: int | None = None, finished_upto: int | None = None,
               among: Sequence[int] = ()) -> OtherSide:
    """The other installation's cut-over record (and the messages it finished in a range, and among
    ``among``), read only."""
    label = redact_urls(url)
    try:
        with read_only(url) as conn:
            state = cutover_state.read(conn)
            finished = (cutover_state.finished_ids(conn, finished_after, finished_upto)
                        if finished_after is not None and finished_upto is not None else [])
            finished = sorted(set(finished) | set(cutover_state.finished_among(conn, among)))
            registered = registration.arrivals(conn, finished)
    except SQLAlchemyError as exc:
        raise Refused(f"the other installation's state database {label} cannot be read "
                      f"({exc.__class__.__name__}): check --from") from exc
    return OtherSide(label, state, finished, registered)


def published_elsewhere(url: str) -> Published:
    """What the other installation published at most (``version_floor.published_by``), read only:
    this one continues above it (decision O19, version floor)."""
    label = redact_urls(url)
    try:
        with read_only(url) as conn:
            return version_floor.published_by(conn)
    except SQLAlchemyError as exc:
        raise Refused(f"the other installation's state database {label} cannot be read ({exc.__class__.__name__}), "
                      "so the versions and event ids it published are not known: check --from") from exc


def touched(url: str, after: int) -> set[str]:
    with read_only(url) as conn:
        return cutover_state.touched_after(conn, after)


@dataclass(frozen=True)
class Agreement:
    unexplained: int
    compared: int
    after_watermark: int          # differences left out: in flights that rows after the watermark changed
    examples: list[str]

    def describe(self) -> str:
        shown = f" (e.g. {', '.join(self.examples)})" if self.examples else ""
        return (f"{self.compared} flight(s) of the live days compared, {self.unexplained} unexplained "
                f"difference(s){shown}; {self.after_watermark} difference(s) in flights changed after the watermark "
                "(processed by one installation only) not counted")


def compare_installations(here_url: str, there_url: str, *, watermark: int, known: Path | None) -> Agreement:
    """Both installations' flights of the live days, as ``msgx compare`` compares them, except the
    flights that rows after ``watermark`` changed on either side (one has processed those rows, the
    other not: they differ by design). Unreadable sides and known-differences files are refused."""
    try:
        rules: list[Rule] = load_rules(known) if known is not None else []
        flids = touched(here_url, watermark) | touched(there_url, watermark)
        here, there = read_postgresql(here_url), read_postgresql(there_url)
    except (RulesError, SourceUnreadable, SQLAlchemyError) as exc:
        raise Refused(f"the two installations cannot be compared: {exc}") from exc
    rules.append(Rule(len(rules) + 1, "*", AFTER_WATERMARK, flids=frozenset(flids)))
    result = compare(here.documents, there.documents, rules=rules, scope=Scope(since=live_since()))
    unexplained = [d.flid for d in result.differences if d.rule is None]
    return Agreement(len(unexplained), result.compared, result.rule_hits.get(len(rules), 0),
                     sorted(set(unexplained))[:5])


def rebuild_projection(app: App, report: Report) -> int | None:
    """The Redis projection on this configuration's key, from this state database (None: no Redis):
    the installation that holds the right now serves every flight as its own database has it."""
    flights = app.rebuild_projection()
    if flights is None:
        report.say("Redis is not configured: no projection to rebuild")
        return None
    report.say(f"Redis projection {app.settings.redis_key} rebuilt from this database: {flights} flight(s)")
    return flights
