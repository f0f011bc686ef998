"""The monitor's own tables (migration 0013): worker heartbeats and the alert state of each check.

``heartbeat`` answers "is the pump alive and looping?" for ``/metrics`` from PostgreSQL, so any
``msgx serve`` instance reports it, not only the process that runs the pump. ``alert_state`` makes
alerting edge-triggered across runs: a scheduled evaluation compares each check with the state
stored here and announces only changes; the announced state is stored separately, so an
announcement that failed (a dead webhook) is retried by the next evaluation and made once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, func, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert

from msgx_engine.store.tables import alert_state, heartbeat

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


def advisory_lock_held(conn: Connection, key: int) -> bool:
    """True when some session holds the session advisory lock ``key`` (the pump's writer lock):
    the server's view of whether a pump runs, whichever host it runs on."""
    # a bigint key shows as classid = its high 32 bits, objid = its low 32 bits, objsubid = 1
    return bool(conn.execute(text(
        "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
        "AND classid::bigint = :hi AND objid::bigint = :lo "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))"),
        {"hi": key >> 32, "lo": key & 0xFFFFFFFF}).scalar_one())


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

    @property
    def announced(self) -> bool:
        return self.notified_failing is self.failing


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
