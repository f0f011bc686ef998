"""The parallel-run record: each scheduled comparison's figures, kept in msgx's own database.

``compare_job`` writes one row per comparison; ``msgx compare --summary`` reads them back over a
window. No table of its own (no migration this round): a comparison is recorded as an
``operator_audit`` row with action ``parallel_run`` and operator ``compare_job``: the audit trail
already has what the record needs (a server timestamp, a JSON selection: the reference and the
known-differences file, a JSON outcome: the figures), is in the state database every CLI command
reaches, and is never archived or purged. The Dagster event log holds the same figures as
metadata of the ``parallel_run`` asset, but the CLI cannot read it.

The load of the window (messages per day by TYPE) is counted over ``proc_state`` and
``proc_state_archive`` together, so archiving does not shrink a past day.

A comparison runs once an hour, but a delivery outage does not wait for it: the hour's worst is
kept in ``parallel_run_hour`` (migration 0019). Every health tick (``monitor.alerts.Alerter``,
every 30 s) folds its reading of the dead-letter backlog and the oldest undelivered event's wait
into the current hour's row as a maximum, in one upsert; a comparison records the worst of the hour
before it, and the summary reads both. Rows are one per hour and small; nothing purges them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from sqlalchemy import Connection, func, literal_column, select, union_all
from sqlalchemy.dialects.postgresql import insert as pg_insert

from msgx_engine.sis.times import LOCAL_TZ
from msgx_engine.store import audit
from msgx_engine.store.tables import operator_audit, parallel_run_hour, proc_state, proc_state_archive

ACTION = "parallel_run"
OPERATOR = "compare_job"
REASON = "scheduled comparison of the parallel run"


@dataclass(frozen=True)
class RecordedRun:
    """One recorded comparison: when, against what, and its figures (``compare.summary.figures``)."""

    at: datetime
    selection: dict[str, Any]
    figures: dict[str, Any]


def record(conn: Connection, figures: Mapping[str, Any], selection: Mapping[str, Any],
           at: datetime | None = None) -> int:
    """One comparison's figures, in the caller's transaction; ``at`` defaults to the server's now."""
    audit_id = audit.record(conn, OPERATOR, ACTION, REASON, selection, figures)
    if at is not None:
        conn.execute(operator_audit.update().where(operator_audit.c.audit_id == audit_id).values(at=at))
    return audit_id


def runs_since(conn: Connection, since: datetime) -> list[RecordedRun]:
    """Every recorded comparison from ``since`` on, oldest first."""
    c = operator_audit.c
    rows = conn.execute(select(c.at, c.selection, c.outcome)
                        .where(c.action == ACTION, c.operator == OPERATOR, c.at >= since)
                        .order_by(c.at, c.audit_id))
    return [RecordedRun(r.at, json.loads(r.selection or "{}"), json.loads(r.outcome or "{}")) for r in rows]


@dataclass(frozen=True)
class Worst:
    """The worst readings over some hours: the highest dead-letter backlog, the longest wait of the
    oldest undelivered event, and how many health ticks they come from (0: nothing was read)."""

    dlq: int = 0
    dwell_s: float = 0.0
    readings: int = 0


@dataclass(frozen=True)
class Hour:
    """One hour's worst (``parallel_run_hour``)."""

    hour: datetime
    worst: Worst
    first_at: datetime
    last_at: datetime


def fold_reading(conn: Connection, at: datetime, *, dlq: int, dwell_s: float) -> None:
    """Fold one health tick's reading into the row of ``at``'s hour, as a maximum (the caller's
    transaction; one statement)."""
    h = parallel_run_hour.c
    excluded = pg_insert(parallel_run_hour).excluded
    conn.execute(pg_insert(parallel_run_hour).values(
        hour=func.date_trunc("hour", at, "UTC"), dlq_max=int(dlq), dwell_max_s=float(dwell_s), readings=1,
        first_at=at, last_at=at).on_conflict_do_update(index_elements=[h.hour], set_={
            "dlq_max": func.greatest(h.dlq_max, excluded.dlq_max),
            "dwell_max_s": func.greatest(h.dwell_max_s, excluded.dwell_max_s),
            "readings": h.readings + 1, "first_at": func.least(h.first_at, excluded.first_at),
            "last_at": func.greatest(h.last_at, excluded.last_at)}))


def hours_between(conn: Connection, since: datetime, until: datetime) -> list[Hour]:
    """The hours with a reading in ``since``..``until``, oldest first."""
    h = parallel_run_hour.c
    rows = conn.execute(select(parallel_run_hour).where(h.last_at >= since, h.first_at <= until).order_by(h.hour))
    return [Hour(r.hour, Worst(int(r.dlq_max), float(r.dwell_max_s), int(r.readings)), r.first_at, r.last_at)
            for r in rows]


def worst_between(conn: Connection, since: datetime, until: datetime) -> Worst:
    """The worst reading of the hours in ``since``..``until`` (all zero when none was read)."""
    hours = hours_between(conn, since, until)
    return Worst(max((x.worst.dlq for x in hours), default=0), max((x.worst.dwell_s for x in hours), default=0.0),
                 sum(x.worst.readings for x in hours))


def load_by_day(conn: Connection, since: datetime) -> dict[date, dict[str, int]]:
    """Messages registered per airport-local day and TYPE from ``since`` on (live and archived)."""
    cols = [proc_state.c.created_at, proc_state.c.msg_type]
    acols = [proc_state_archive.c.created_at, proc_state_archive.c.msg_type]
    both = union_all(select(*cols).where(proc_state.c.created_at >= since),
                     select(*acols).where(proc_state_archive.c.created_at >= since)).subquery()
    day = func.date(func.timezone(literal_column(f"'{LOCAL_TZ.key}'"), both.c.created_at))
    rows = conn.execute(select(day.label("day"), func.coalesce(both.c.msg_type, "(unreadable)").label("type"),
                               func.count().label("n")).group_by("day", "type").order_by("day", "type"))
    load: dict[date, dict[str, int]] = {}
    for r in rows:
        load.setdefault(r.day, {})[r.type] = int(r.n)
    return load
