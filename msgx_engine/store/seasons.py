"""Seasonal schedule storage: one season (SNAM, SDAT, EDAT) replaced whole in transaction 1.

``write_season`` deletes the season's flights and route points and inserts the new ones in bulk,
and bumps ``season_sched.version``. ``last_message_id`` tells the route which message last replaced
a season (the handler plans nothing for a replay, like the daily ledger). No outbox events: seasons
are planning data that
no consumer subscribes to yet, and ``flight_schd`` is never touched.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, Table, and_, delete, insert, select
from sqlalchemy.dialects.postgresql import insert as pg_insert

from msgx_engine.handlers.seasons import SEASON_FLIGHT_SCALARS, SEASON_ROUTE_PARTS, SeasonPlan
from msgx_engine.store.outbox import OutboxRow
from msgx_engine.store.tables import season_flight, season_route_point, season_sched


def _key(table: Table, key: tuple[str, str, str]):
    snam, sdat, edat = key
    return and_(table.c.snam == snam, table.c.sdat == sdat, table.c.edat == edat)


def last_message_id(conn: Connection, key: tuple[str, str, str]) -> int | None:
    """The mailbox id of the message that last replaced season ``key`` (None: a new season)."""
    return conn.execute(select(season_sched.c.last_message_id).where(_key(season_sched, key))).scalar()


def write_season(conn: Connection, plan: SeasonPlan, msg_id: int, now: datetime) -> list[OutboxRow]:
    """Transaction-1 write of an accepted SCHS package: the season replaced whole."""
    s = plan.season
    conn.execute(pg_insert(season_sched).values(
        snam=s.snam, sdat=s.sdat, edat=s.edat, apcd=s.apcd, recs=len(s.flights), version=1,
        last_message_id=msg_id, updated_at=now).on_conflict_do_update(
        constraint="season_sched_pkey",
        set_={"apcd": s.apcd, "recs": len(s.flights), "last_message_id": msg_id, "updated_at": now,
              "version": season_sched.c.version + 1}))
    for table in (season_route_point, season_flight):
        conn.execute(delete(table).where(_key(table, s.key)))
    key = {"snam": s.snam, "sdat": s.sdat, "edat": s.edat}
    flights, routes = [], []
    for ordinal, flight in enumerate(s.flights, start=1):
        flights.append({**key, "ordinal": ordinal,
                        **{c.lower(): flight.scalars.get(c) for c in SEASON_FLIGHT_SCALARS}})
        per_kind: dict[str, int] = {}
        for kind, entry in flight.routes:
            per_kind[kind] = per_kind.get(kind, 0) + 1
            routes.append({**key, "flight_ordinal": ordinal, "route_kind": kind, "ordinal": per_kind[kind],
                           "source_seq": entry.get("RTNO"),
                           **{p.lower(): entry.get(p) for p in SEASON_ROUTE_PARTS}})
    if flights:
        conn.execute(insert(season_flight), flights)
    if routes:
        conn.execute(insert(season_route_point), routes)
    return []
