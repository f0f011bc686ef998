"""The monitor's own tables (migrations 0013, 0014): worker heartbeats and the alert state of each
check; and the monitor's queries over the messages that wait for an operator.

``heartbeat`` answers "is the pump alive and looping?" for ``/metrics`` from PostgreSQL, so any
``msgx serve`` instance reports it, not only the process that runs the pump. ``alert_state`` makes
alerting edge-triggered across runs: a scheduled evaluation compares each check with the state
stored here and announces only changes; the announced state is stored separately, so an
announcement that failed (a dead webhook) is retried by the next evaluation and made once.

A failing check that counts things an operator must handle (dead letters, dead outbox events)
alerts again whenever the count rises, naming the new ids: ``notified_value`` holds the count its
last evaluation saw and ``notified_detail`` a ``Tally`` (JSON) with the ids seen then and a rise
raised but not yet taken by the webhook, so that rise is posted once, by a later evaluation if
the webhook was down.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, Insert, Update, func, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert

from msgx_engine.store.tables import IS_WAITING_DEAD, IS_WAITING_UNSUPPORTED, alert_state, heartbeat, proc_state

PUMP = "pump"


# --- heartbeats --------------------------------------------------------------------------------
def beat(conn: Connection, component: str, *, pid: int, host: str, started: bool = False) -> None:
    """Record that ``component`` is alive now (database time: the same clock every reader uses)."""
    values: dict[str, object] = {"component": component, "pid": pid, "host": host, "beat_at": func.now()}
    if started:
        values["started_at"] = func.now()
    stmt = pg_insert(heartbeat).values(**values)
    conn.execute(stmt.on_conflict_do_update(index_elements=[heartbeat.c.component],
                                            set_={k: stmt.excluded[k] for k in values if k != "component"}))


@dataclass(frozen=True)
class Heartbeat:
    component: str
    pid: int | None
    host: str | None
    started_at: datetime | None
    beat_at: datetime


def heartbeats(conn: Connection) -> list[Heartbeat]:
    rows = conn.execute(select(heartbeat.c.component, heartbeat.c.pid, heartbeat.c.host, heartbeat.c.started_at,
                               heartbeat.c.beat_at).order_by(heartbeat.c.component))
    return [Heartbeat(*r) for r in rows]


def claim(conn: Connection, component: str, *, host: str, pid: int, seen: Heartbeat | None) -> bool:
    """Hand ``component`` to ``host`` if its row is still the one the caller read (``seen``; None: no
    row yet): one compare-and-set statement, so of two hosts claiming from the same sighting one wins
    and the other gets False. The row's ``started_at`` and ``beat_at`` become the claim's time."""
    stmt: Insert | Update
    if seen is None:
        stmt = pg_insert(heartbeat).values(component=component, pid=pid, host=host, started_at=func.now(),
                                           beat_at=func.now()).on_conflict_do_nothing()
    else:
        stmt = update(heartbeat).where(
            heartbeat.c.component == component, heartbeat.c.host.is_not_distinct_from(seen.host),
            heartbeat.c.beat_at == seen.beat_at).values(host=host, pid=pid, started_at=func.now(), beat_at=func.now())
    return conn.execute(stmt.returning(heartbeat.c.component)).first() is not None


def database_now(conn: Connection) -> datetime:
    """PostgreSQL's clock, the one every heartbeat is written with: a heartbeat's age read against
    it owes nothing to the reader's host clock."""
    return conn.execute(select(func.now())).scalar_one()


# a bigint key shows as classid = its high 32 bits, objid = its low 32 bits, objsubid = 1
_ADVISORY_HOLDER = ("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
                    "AND classid::bigint = :hi AND objid::bigint = :lo "
                    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")


def advisory_lock_held(conn: Connection, key: int) -> bool:
    """True when some session holds the session advisory lock ``key`` (the pump's writer lock):
    the server's view of whether a pump runs, whichever host it runs on."""
    return bool(conn.execute(text(f"SELECT EXISTS ({_ADVISORY_HOLDER})"),
                             {"hi": key >> 32, "lo": key & 0xFFFFFFFF}).scalar_one())


def end_lock_holder(conn: Connection, key: int) -> int | None:
    """End the session that holds the advisory lock ``key``, if any; its server pid. For a warm
    standby taking over from a dead host: PostgreSQL keeps that host's session, and the writer lock
    with it, until its TCP connection times out. Only called once both of that host's heartbeats
    are past the limit; the guarded writes of a pump that is somehow alive then change nothing (the
    lock's backend pid is gone)."""
    pid = conn.execute(text(_ADVISORY_HOLDER), {"hi": key >> 32, "lo": key & 0xFFFFFFFF}).scalar()
    if pid is not None:
        conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
    return pid


# --- alert state -------------------------------------------------------------------------------
@dataclass(frozen=True)
class AlertState:
    check_name: str
    failing: bool
    since: datetime
    evaluated_at: datetime
    summary: str | None
    value: float | None
    notified_failing: bool | None
    notified_at: datetime | None
    notify_error: str | None
    notified_value: float | None = None
    notified_detail: str | None = None

    @property
    def announced(self) -> bool:
        return self.notified_failing is self.failing

    @property
    def tally(self) -> Tally | None:
        """What the counting check saw at its last failing evaluation (None: passing, or not a count)."""
        return Tally.from_json(self.notified_detail) if self.notified_detail else None


@dataclass(frozen=True)
class Tally:
    """A failing counting check's ids as of its last evaluation, and a rise not yet posted:
    ``pending`` with the ``new`` ids it named and the count it ``rose_from``."""

    count: int
    ids: tuple[int, ...] = ()
    pending: bool = False
    new: tuple[int, ...] = ()
    rose_from: int | None = None

    def to_json(self) -> str:
        return json.dumps({"count": self.count, "ids": list(self.ids), "pending": self.pending,
                           "new": list(self.new), "rose_from": self.rose_from}, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str) -> Tally | None:
        try:
            doc = json.loads(raw)
            return cls(int(doc["count"]), tuple(int(i) for i in doc.get("ids", ())), bool(doc.get("pending")),
                       tuple(int(i) for i in doc.get("new", ())), doc.get("rose_from"))
        except (ValueError, TypeError, KeyError):
            return None      # unreadable: treated as no tally (the next evaluation writes a fresh one)


_STATE_COLUMNS = [getattr(alert_state.c, f) for f in AlertState.__dataclass_fields__]


def alert_states(conn: Connection, *, for_update: bool = False) -> dict[str, AlertState]:
    query = select(*_STATE_COLUMNS).order_by(alert_state.c.check_name)
    if for_update:
        query = query.with_for_update()
    return {r.check_name: AlertState(*r) for r in conn.execute(query)}


def record_evaluation(conn: Connection, name: str, *, failing: bool, at: datetime, summary: str,
                      value: float | None, changed: bool) -> None:
    """Store one check's evaluation; ``since`` moves only when its state changed (or on first sight)."""
    values = {"check_name": name, "failing": failing, "since": at, "evaluated_at": at, "summary": summary,
              "value": value}
    stmt = pg_insert(alert_state).values(**values)
    set_ = {"failing": stmt.excluded.failing, "evaluated_at": stmt.excluded.evaluated_at,
            "summary": stmt.excluded.summary, "value": stmt.excluded.value}
    if changed:
        set_["since"] = stmt.excluded.since
    conn.execute(stmt.on_conflict_do_update(index_elements=[alert_state.c.check_name], set_=set_))


def mark_announced(conn: Connection, name: str, failing: bool, at: datetime) -> bool:
    """Record that state ``failing`` of ``name`` was announced; False when the state moved on
    meanwhile (then the new state is announced by the next evaluation)."""
    res = conn.execute(update(alert_state).where(alert_state.c.check_name == name,
                                                 alert_state.c.failing == failing)
                       .values(notified_failing=failing, notified_at=at, notify_error=None))
    return res.rowcount == 1


def note_announce_error(conn: Connection, name: str, error: str) -> None:
    conn.execute(update(alert_state).where(alert_state.c.check_name == name).values(notify_error=error[:500]))


def record_tally(conn: Connection, name: str, tally: Tally | None) -> None:
    """Store a counting check's tally (None clears it: the check passes)."""
    conn.execute(update(alert_state).where(alert_state.c.check_name == name).values(
        notified_value=None if tally is None else float(tally.count),
        notified_detail=None if tally is None else tally.to_json()))


def mark_rise_announced(conn: Connection, name: str, posted: Tally) -> bool:
    """The webhook took the rise in ``posted``: clear it, unless an evaluation stored a newer tally
    meanwhile (then that one is posted next, naming the ids again: a repeat, never a loss)."""
    done = Tally(posted.count, posted.ids)
    res = conn.execute(update(alert_state).where(alert_state.c.check_name == name,
                                                 alert_state.c.notified_detail == posted.to_json())
                       .values(notified_detail=done.to_json()))
    return res.rowcount == 1


# --- what waits for an operator ------------------------------------------------------------------------
# Unacknowledged DEAD and SKIPPED(unsupported) messages: every statement here names the conditions of
# the partial index proc_state_attention_idx, so it is read, not the table.


def waiting_dead_count(conn: Connection) -> int:
    """DEAD messages no operator has acknowledged: the dead-letter count."""
    return int(conn.execute(select(func.count()).where(*IS_WAITING_DEAD)).scalar_one())


def waiting_dead_ids(conn: Connection, limit: int) -> list[int]:
    """Their mailbox ids, oldest first, at most ``limit`` (a rise re-alerts naming the new ones)."""
    return [int(r[0]) for r in conn.execute(select(proc_state.c.msg_id).where(*IS_WAITING_DEAD)
                                            .order_by(proc_state.c.msg_id).limit(limit))]


def waiting_unsupported_types(conn: Connection, since: datetime) -> list[tuple[str, int]]:
    """``TYPE-STYP`` and count of unacknowledged SKIPPED(unsupported) messages registered since
    ``since`` (the unsupported-types check: what the AODB sends that msgx does not know)."""
    ps = proc_state.c
    label = func.concat(func.coalesce(ps.msg_type, "?"), "-", func.coalesce(ps.msg_styp, "?"))
    rows = conn.execute(select(label, func.count())
                        .where(*IS_WAITING_UNSUPPORTED, ps.created_at >= since)
                        .group_by(label).order_by(label)).fetchall()
    return [(r[0], int(r[1])) for r in rows]
