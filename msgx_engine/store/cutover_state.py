"""The cut-over's record in a state database (``cutover_state``) and the statements the cut-over
commands run on the queue and the outbox (OPS-4, PRE-1).

One row, written only by ``msgx cutover …``: the installation's role since then, whether it gave
up the right to process and mark the mailbox (``writes = stopped``, at ``watermark``), and the
watermark it went on from when it took the right over (``took_over_at``). A database without the
row was never touched by a cut-over and runs as ``MSGX_MODE`` says.

The row is why a stopped installation *stays* stopped: the Dagster sensor relaunches the pump, and
a relaunched pump would take the mailbox lock again the moment the other installation's pump let
it go. ``WriteRight`` is the pump's side of it: checked when the pump starts (it refuses before it
takes the mailbox lock or marks anything) and at most every second while it runs (it stops). It
also refuses a shadow pump on a database that a promote made production's, and a production pump
on a shadow's database: a shadow records its role the first time its pump starts (or at ``msgx
shadow start-from``), so the role is one row read, not guessed from the database's history.

``DeliveryRight`` is the dispatcher's side: no event is published while the installation has given
up the right (stopped at a watermark) or while a rollback to it is in progress. The events such an
installation holds were published by the other installation or are its to publish; a rollback
killed between a commit of its replay and the suppression of that commit's events leaves them
unsent, and the next dispatcher must not send them: the rollback run again suppresses them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy import Connection, Engine, ScalarSelect, delete, exists, func, select, union, update
from sqlalchemy.dialects.postgresql import insert as pg_insert

from msgx_engine.store.status import TERMINAL, TodoStatus
from msgx_engine.store.tables import (
    IS_OPEN,
    IS_PENDING_TODO,
    backfill_todo,
    cutover_state,
    flight_schd,
    intake_gap,
    intake_state,
    msg_event,
    operator_audit,
    proc_state,
    proc_state_archive,
)

log = logging.getLogger(__name__)

ROW = "installation"
PRODUCTION, SHADOW = "production", "shadow"
OPEN_WRITES, STOPPED = "open", "stopped"
ROLLING_BACK = "rolling_back"     # stopped, and ``msgx cutover rollback`` is bringing the other's rows over
CHECK_EVERY_S = 1.0


@dataclass(frozen=True)
class CutoverState:
    role: str
    writes: str = OPEN_WRITES
    watermark: int | None = None
    took_over_at: int | None = None
    audit_id: int | None = None

    @property
    def stopped(self) -> bool:
        """No right to process and mark the mailbox: stopped, or stopped and rolling back."""
        return self.writes in (STOPPED, ROLLING_BACK)

    @property
    def rolling_back(self) -> bool:
        return self.writes == ROLLING_BACK


def read(conn: Connection) -> CutoverState | None:
    row = conn.execute(select(cutover_state.c.role, cutover_state.c.writes, cutover_state.c.watermark,
                              cutover_state.c.took_over_at, cutover_state.c.audit_id)
                       .where(cutover_state.c.name == ROW)).first()
    return None if row is None else CutoverState(row.role, row.writes, row.watermark, row.took_over_at, row.audit_id)


def write(conn: Connection, state: CutoverState) -> None:
    values = {"role": state.role, "writes": state.writes, "watermark": state.watermark,
              "took_over_at": state.took_over_at, "audit_id": state.audit_id, "updated_at": func.now()}
    conn.execute(pg_insert(cutover_state).values(name=ROW, **values)
                 .on_conflict_do_update(index_elements=["name"], set_=values))


def restore(conn: Connection, previous: CutoverState | None) -> None:
    """Put the row back as it was before a command that is refused after all."""
    if previous is None:
        conn.execute(delete(cutover_state).where(cutover_state.c.name == ROW))
    else:
        write(conn, previous)


def stopping(previous: CutoverState | None) -> CutoverState:
    """The row while ``stop-writes`` waits for a running pump to stop: stopped, no watermark yet."""
    return replace(previous or CutoverState(PRODUCTION), writes=STOPPED, watermark=None)


# --- the stop as the operator reads it ----------------------------------------------------------
@dataclass(frozen=True)
class Stop:
    """A stopped installation's cut-over record with the audit row that stopped it: what ``msgx
    status``, the health checks, ``/metrics``, the Dagster ticks and every refusal say."""

    watermark: int | None         # None: stop-writes is still draining (or died before it recorded one)
    operator: str | None
    at: datetime | None
    audit_id: int | None
    rolling_back: bool = False

    def describe(self) -> str:
        """One line, the same everywhere: "writes stopped for cut-over at mailbox id W (by NAME, at TIME)"."""
        where = f"at mailbox id {self.watermark}" if self.watermark is not None else "(stop-writes still draining)"
        when = f"at {self.at.isoformat(sep=' ', timespec='seconds')}" if self.at else ""
        who = ", ".join(part for part in (f"by {self.operator}" if self.operator else "", when) if part)
        line = f"writes stopped for cut-over {where}" + (f" ({who})" if who else "")
        return line + ("; a rollback to this installation is in progress" if self.rolling_back else "")


def stop(conn: Connection) -> Stop | None:
    """This installation's stop (None: it holds the right to write, or no cut-over touched it)."""
    c, a = cutover_state.c, operator_audit.c
    row = conn.execute(select(c.writes, c.watermark, c.audit_id, a.operator, a.at)
                       .select_from(cutover_state.outerjoin(operator_audit, a.audit_id == c.audit_id))
                       .where(c.name == ROW)).first()
    if row is None or row.writes not in (STOPPED, ROLLING_BACK):
        return None
    # the audit row named in the record is the stop's only once the stop recorded its watermark
    stopped_by = row.watermark is not None or row.writes == ROLLING_BACK
    return Stop(row.watermark, row.operator if stopped_by else None, row.at if stopped_by else None,
                row.audit_id, row.writes == ROLLING_BACK)


@dataclass(frozen=True)
class Takeover:
    """The cut-over that gave this installation the right it holds: a promote of it, or a rollback to
    it (the 48-hour observation after a cut-over starts here, OPS-4)."""

    how: str               # "promote" or "rollback"
    watermark: int         # the other installation's watermark this one went on from
    operator: str
    at: datetime


TAKEOVER_ACTIONS = {"cutover_promote": "promote", "cutover_rollback": "rollback"}


def takeover(conn: Connection) -> Takeover | None:
    """The promote or rollback behind this installation's open writes (None: it never took over, or it
    is stopped again)."""
    c, a = cutover_state.c, operator_audit.c
    row = conn.execute(select(c.writes, c.took_over_at, a.operator, a.at, a.action)
                       .select_from(cutover_state.join(operator_audit, a.audit_id == c.audit_id))
                       .where(c.name == ROW)).first()
    if row is None or row.writes != OPEN_WRITES or row.took_over_at is None or row.action not in TAKEOVER_ACTIONS:
        return None
    return Takeover(TAKEOVER_ACTIONS[row.action], int(row.took_over_at), row.operator, row.at)


class RequestsStopped(RuntimeError):
    """A request to the AODB asked of an installation whose writes are stopped for a cut-over:
    refused before anything is registered or written to COUTMSGS."""


def request_refusal(found: Stop | None) -> str | None:
    """Why no request may be registered or sent to the AODB here (None: it may). The installation
    that holds the right asks the AODB; a stopped one asking too would have the AODB answer twice,
    into whichever installation reads the answer first."""
    if found is None:
        return None
    return (f"{found.describe()}: this installation sends nothing to the AODB (COUTMSGS) and registers no "
            "request while its writes are stopped; nothing was registered or sent. Ask the installation that holds "
            "the right (the promoted one), or give the right back here with `msgx cutover resume` or "
            "`msgx cutover rollback`")


def refuse_requests(conn: Connection) -> None:
    """Raise ``RequestsStopped`` when this installation's writes are stopped (the caller's transaction)."""
    why = request_refusal(stop(conn))
    if why is not None:
        log.warning("request refused: %s", why)
        raise RequestsStopped(why)


# --- the pump's and the dispatcher's side -------------------------------------------------------
class WritesStopped(RuntimeError):
    """This installation gave up the right to process the mailbox, or its role is not the mode's."""


def _stopped_because(state: CutoverState) -> str:
    if state.rolling_back:
        return (f"a rollback to this installation is in progress (`msgx cutover rollback`, audit {state.audit_id}): "
                "writes reopen when it finishes. Run the same rollback command again to finish it")
    at = f" at mailbox id {state.watermark}" if state.watermark is not None else ""
    return (f"writes are stopped on this installation{at} (`msgx cutover stop-writes`, audit {state.audit_id}): "
            "another installation may hold the right to process the mailbox")


def refusal(state: CutoverState | None, *, shadow: bool) -> str | None:
    """Why a pump must not run on a database in this state (None: it may)."""
    if state is None:
        return None
    if state.stopped:
        return (_stopped_because(state) + ". This pump exits without taking the mailbox lock or marking anything; "
                "`msgx cutover rollback`, `msgx cutover resume` or `msgx cutover promote` gives the right back")
    if shadow and state.role == PRODUCTION:
        return ("MSGX_MODE=shadow, but this state database became a production installation's through "
                "`msgx cutover promote`: a shadow needs a state database of its own")
    if not shadow and state.role == SHADOW:
        return ("MSGX_MODE is production, but this state database is a shadow's (a shadow pump or `msgx shadow "
                "start-from` ran on it): a production pump would mark the mailbox from a shadow's state. If this "
                "installation takes over from production, run `msgx cutover promote` (see the runbook's "
                "\"Cut-over and rollback\"); if it is meant to stay a shadow, set MSGX_MODE=shadow")
    return None


def delivery_refusal(state: CutoverState | None) -> str | None:
    """Why a dispatcher must not publish (None: it may). While ``stop-writes`` waits for the pump and
    drains (stopped, no watermark yet) this installation still holds the right: its own drain
    delivers what it owes then."""
    if state is None or not state.stopped or (state.watermark is None and not state.rolling_back):
        return None
    return (_stopped_because(state) + ". Nothing is published from this installation meanwhile: the events it "
            "holds were published by the other installation, or wait for the right to come back")


def claim_shadow(conn: Connection) -> bool:
    """Record that this state database is a shadow's, unless the row says something already (the
    caller's transaction). True when it wrote the row."""
    done = conn.execute(pg_insert(cutover_state).values(name=ROW, role=SHADOW, writes=OPEN_WRITES)
                        .on_conflict_do_nothing(index_elements=["name"])).rowcount
    return bool(done)


class _RecordCheck:
    """The cut-over record, read on a process's start and at most every ``CHECK_EVERY_S`` after."""

    what = "process"

    def __init__(self, engine: Engine, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.engine = engine
        self._monotonic = monotonic
        self._checked = monotonic()

    def why(self, state: CutoverState | None) -> str | None:
        raise NotImplementedError

    def check(self, conn: Connection) -> None:
        """At the start, on the process's locked connection: raise ``WritesStopped`` when it must not run."""
        why = self.why(read(conn))
        conn.commit()
        if why is not None:
            log.warning("%s refused: %s", self.what, why)
            raise WritesStopped(why)

    def stopped_meanwhile(self) -> bool:
        """While it runs, at most every ``CHECK_EVERY_S``: did a cut-over command stop it?"""
        now = self._monotonic()
        if now - self._checked < CHECK_EVERY_S:
            return False
        self._checked = now
        with self.engine.connect() as conn:
            why = self.why(read(conn))
        if why is not None:
            log.warning("%s stops: %s", self.what, why)
        return why is not None


class WriteRight(_RecordCheck):
    """The pump's check of ``cutover_state`` (module doc). ``replay``: the rollback's own pump, which
    runs while the row still says stopped (nothing else may run then). A shadow pump that finds no
    row records the shadow role."""

    what = "pump"

    def __init__(self, engine: Engine, *, shadow: bool, monotonic: Callable[[], float] = time.monotonic) -> None:
        super().__init__(engine, monotonic=monotonic)
        self.shadow = shadow
        self.replay = False

    def why(self, state: CutoverState | None) -> str | None:
        return None if self.replay else refusal(state, shadow=self.shadow)

    def check(self, conn: Connection) -> None:
        if self.shadow and not self.replay and claim_shadow(conn):
            log.info("this state database is recorded as a shadow's")
        super().check(conn)


class DeliveryRight(_RecordCheck):
    """The dispatcher's check of ``cutover_state`` (module doc)."""

    what = "dispatcher"

    def why(self, state: CutoverState | None) -> str | None:
        return delivery_refusal(state)


# --- where the queue stands ---------------------------------------------------------------------
@dataclass(frozen=True)
class Position:
    lowest_open: int | None      # the queue head: the smallest registered id not finished
    accounted_for: int           # every mailbox id at or below is registered, a recorded gap, or history
    applied_open: int | None     # the smallest id that changed flights but has not finished (post-commit waits)


def position(conn: Connection) -> Position:
    lowest = select(func.min(proc_state.c.msg_id)).where(IS_OPEN).scalar_subquery()
    applied = (select(func.min(proc_state.c.msg_id)).where(IS_OPEN, proc_state.c.applied_at.is_not(None))
               .scalar_subquery())
    top = func.greatest(
        select(func.coalesce(func.max(proc_state.c.msg_id), 0)).scalar_subquery(),
        select(func.coalesce(func.max(proc_state_archive.c.msg_id), 0)).scalar_subquery(),
        select(func.coalesce(func.max(intake_state.c.high_water), 0)).scalar_subquery())
    low, accounted, applied_open = conn.execute(select(lowest, top, applied)).one()
    return Position(low, int(accounted), applied_open)


def finished_above(conn: Connection, watermark: int) -> int:
    """Finished messages above ``watermark`` (a late arrival below them is still open)."""
    return int(conn.execute(select(func.count()).select_from(proc_state)
                            .where(proc_state.c.msg_id > watermark, proc_state.c.status.in_(TERMINAL))).scalar_one())


def pending_marks(conn: Connection, upto: int) -> int:
    """Mailbox marks still owed for messages at or below ``upto``."""
    return int(conn.execute(select(func.count()).select_from(backfill_todo).where(
        backfill_todo.c.msg_id <= upto, IS_PENDING_TODO)).scalar_one())


@dataclass(frozen=True)
class Undelivered:
    """Events of messages at or below a watermark that are not delivered."""

    waiting: int        # due, or in backoff: a dispatcher still delivers them
    dead: int           # delivery gave up on them (``msgx outbox``)
    held: int           # not dead, but behind a dead event of their flight and topic: they wait for its revival

    @property
    def lost(self) -> int:
        """What nobody publishes if this installation stops now: the dead and what waits behind them."""
        return self.dead + self.held


def undelivered(conn: Connection, upto: int) -> Undelivered:
    """The events of messages at or below ``upto`` not delivered (a scan, once per stop-writes)."""
    e, d = msg_event.c, msg_event.alias("d").c
    unsent = (e.msg_id <= upto, e.sent_at.is_(None))
    behind_dead = exists().where(d.flid == e.flid, d.topic == e.topic, d.dead_at.is_not(None), d.sent_at.is_(None))

    def count(*where) -> ScalarSelect:
        return select(func.count()).select_from(msg_event).where(*unsent, *where).scalar_subquery()

    waiting, dead, held = conn.execute(select(
        count(e.dead_at.is_(None), ~behind_dead), count(e.dead_at.is_not(None)),
        count(e.dead_at.is_(None), behind_dead))).one()
    return Undelivered(int(waiting), int(dead), int(held))


def dead_examples(conn: Connection, upto: int, limit: int = 5) -> list[str]:
    """A few dead events of messages at or below ``upto``, as an operator finds them in ``msgx outbox``."""
    e = msg_event.c
    rows = conn.execute(select(e.event_id, e.topic, e.flid, e.msg_id).where(
        e.msg_id <= upto, e.sent_at.is_(None), e.dead_at.is_not(None)).order_by(e.event_id).limit(limit))
    return [f"event {r.event_id} ({r.topic}, flight {r.flid}, mailbox id {r.msg_id})" for r in rows]


# --- what promote and rollback change -----------------------------------------------------------
def owe_marks_after(conn: Connection, after: int) -> int:
    """A promoted shadow owes the mailbox marks of the rows it processed after the watermark: their
    SHADOW todos become due (the backfill writes them only where NULL)."""
    return conn.execute(update(backfill_todo).where(
        backfill_todo.c.msg_id > after, backfill_todo.c.status == TodoStatus.SHADOW)
        .values(status=TodoStatus.PENDING, attempts=0, next_attempt_at=None, last_error=None,
                done_at=None)).rowcount


def deliver_again_after(conn: Connection, after: int) -> int:
    """Events of the rows after the watermark went to the shadow's topics (or nowhere): due again,
    now for the production topics."""
    e = msg_event.c
    return conn.execute(update(msg_event).where(e.msg_id > after, e.sent_at.is_not(None) | e.dead_at.is_not(None))
                        .values(sent_at=None, dead_at=None, send_attempts=0, next_send_at=None,
                                send_error=None)).rowcount


def suppress(conn: Connection, now: datetime, note: str, *, upto: int | None = None,
             ids: Sequence[int] = ()) -> int:
    """Events already published by the other installation: recorded sent without being sent (the
    messages at or below ``upto``, or among ``ids``), so no dispatcher publishes them twice."""
    e = msg_event.c
    which = e.msg_id <= upto if upto is not None else e.msg_id.in_(list(ids))
    if upto is None and not ids:
        return 0
    return conn.execute(update(msg_event).where(which, e.sent_at.is_(None))
                        .values(sent_at=now, dead_at=None, next_send_at=None, send_error=note)).rowcount


def suppressed(conn: Connection, note: str, ids: Sequence[int]) -> int:
    """How many events of the messages ``ids`` were recorded sent without sending, with ``note``."""
    if not ids:
        return 0
    e = msg_event.c
    return int(conn.execute(select(func.count()).select_from(msg_event).where(
        e.msg_id.in_(list(ids)), e.send_error == note, e.sent_at.is_not(None))).scalar_one())


def finished_ids(conn: Connection, after: int, upto: int) -> list[int]:
    """Finished messages with ``after < id <= upto``, archived ones included."""
    live = select(proc_state.c.msg_id).where(proc_state.c.msg_id > after, proc_state.c.msg_id <= upto,
                                             proc_state.c.status.in_(TERMINAL))
    old = select(proc_state_archive.c.msg_id).where(proc_state_archive.c.msg_id > after,
                                                    proc_state_archive.c.msg_id <= upto)
    return sorted(int(r[0]) for r in conn.execute(union(live, old)))


def finished_among(conn: Connection, ids: Sequence[int]) -> list[int]:
    """Which of ``ids`` are finished here, archived ones included."""
    if not ids:
        return []
    live = select(proc_state.c.msg_id).where(proc_state.c.msg_id.in_(list(ids)), proc_state.c.status.in_(TERMINAL))
    old = select(proc_state_archive.c.msg_id).where(proc_state_archive.c.msg_id.in_(list(ids)))
    return sorted(int(r[0]) for r in conn.execute(union(live, old)))


def open_gaps(conn: Connection) -> list[int]:
    return [int(r[0]) for r in conn.execute(select(intake_gap.c.msg_id).where(intake_gap.c.arrived_at.is_(None)))]


def not_finished(conn: Connection, ids: Sequence[int]) -> list[int]:
    """Which of ``ids`` are registered here and not finished, or not registered at all."""
    if not ids:
        return []
    done = {int(r[0]) for r in conn.execute(select(proc_state.c.msg_id).where(
        proc_state.c.msg_id.in_(list(ids)), proc_state.c.status.in_(TERMINAL)))}
    return sorted(set(ids) - done)


def touched_after(conn: Connection, after: int) -> set[str]:
    """Flights that messages after ``after`` changed: their events, and the flights they wrote last."""
    q = union(select(msg_event.c.flid).where(msg_event.c.msg_id > after),
              select(flight_schd.c.flid).where(flight_schd.c.last_message_id > after))
    return {str(r[0]) for r in conn.execute(q)}
