"""The stand -> airbridge mapping as the store keeps it (US-14, D27, stand to airbridge): read from the ABDG reference
category, derived into every flight state written, re-derived when the category changes.

- ``read_bridges``: the mapping from ``ref_master`` (one statement), or None while the ABDG
  category has never been loaded whole (no DNLD/RESP in ``ref_load``): ADD/UPD records alone are
  not a complete mapping (US-14 AC3), so a stand is then published with ``ABDG: null``.
- ``BridgeReader``: reads the mapping at most once per transaction, only when a written state
  names a stand, and raises the ALERT when the mapping is missing (the flight is still written:
  the queue never waits for reference data).
- ``refresh_bridges``: the writer of ``BridgeRefresh`` (an ABDG message's plan): writes its records,
  then rewrites through ``store.refresh`` (version +1, msg/schd events) every live flight on a stand
  whose airbridges changed and whose stored airbridges differ from the new mapping. Only those
  stands' flights are read: an ABDG download that changes nothing (the daily case) reads no flight,
  and one that does reads a few hundred, however many days of flights the store holds. Deleted
  flights are left: restoring one derives its airbridges afresh (``state.bridges.needs_derivation``).
- ``mapping_status``: the figures of the Dagster asset check on the reference data.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection

from msgx_engine.handlers.reference import BridgeRefresh
from msgx_engine.state.bridges import ABDG, BridgeMap, bridge_map, bridges_for, changed_stands, derive, from_column
from msgx_engine.store.outbox import OutboxRow
from msgx_engine.store.reference import write_reference
from msgx_engine.store.refresh import refresh_flights

log = logging.getLogger(__name__)

_MAPPING_SQL = (
    "SELECT EXISTS (SELECT 1 FROM ref_load WHERE rtype = %(rtype)s) AS loaded, "
    "(SELECT json_agg(json_build_array(rkey, fields)) FROM ref_master WHERE rtype = %(rtype)s) AS records")
# Live flights with what is stored for them and every stand each names, to derive from.
_STANDS_OF = ("SELECT f.flid, f.stand_bridges, f.stnd, array_remove(array_agg(p.psst), NULL) AS pssts "
              "FROM flight_schd f LEFT JOIN flight_stand_plan p ON p.flid = f.flid WHERE NOT f.deleted AND {} "
              "GROUP BY f.flid")
# ... those naming a stand (one pass over flight_schd + PSDT rows)
_NAMED_STANDS_SQL = _STANDS_OF.format("(f.stnd IS NOT NULL OR p.psst IS NOT NULL)")
# ... those naming one of %(stands)s
_ON_STANDS_SQL = _STANDS_OF.format("f.flid IN (SELECT flid FROM flight_schd WHERE stnd = ANY(%(stands)s) "
                                   "UNION SELECT flid FROM flight_stand_plan WHERE psst = ANY(%(stands)s))")


def read_bridges(conn: Connection) -> BridgeMap | None:
    """The current mapping (stand -> sorted airbridge codes), or None when ABDG was never loaded."""
    loaded, records = conn.exec_driver_sql(_MAPPING_SQL, {"rtype": ABDG}).one()
    if not loaded:
        return None
    if isinstance(records, str):
        records = json.loads(records)
    return bridge_map((code, json.loads(fields)) for code, fields in records or ())


class BridgeReader:
    """The mapping for one transaction, read on first use; alerts once when it is missing."""

    def __init__(self, conn: Connection, msg_id: int) -> None:
        self.conn = conn
        self.msg_id = msg_id
        self._read = False
        self._mapping: BridgeMap | None = None

    def __call__(self) -> BridgeMap | None:
        if not self._read:
            self._mapping = read_bridges(self.conn)
            self._read = True
            if self._mapping is None:
                log.error("ALERT stand->airbridge mapping missing: the ABDG reference data was never loaded; "
                          "mailbox id %s writes its stands with ABDG null (US-14 AC3)", self.msg_id)
        return self._mapping


def stale_flights(conn: Connection, mapping: BridgeMap | None, stands: frozenset[str] | None = None) -> list[str]:
    """Live flights whose stored airbridges differ from what ``mapping`` gives their stands, among
    the flights naming one of ``stands`` (None: every flight naming a stand)."""
    if stands is not None and not stands:
        return []
    rows = (conn.exec_driver_sql(_NAMED_STANDS_SQL) if stands is None
            else conn.exec_driver_sql(_ON_STANDS_SQL, {"stands": sorted(stands)}))
    stale = []
    for flid, stored, stnd, pssts in rows:
        named = set(pssts or ()) | ({stnd} if stnd else set())
        if bridges_for(named, mapping) != from_column(stored):
            stale.append(flid)
    return stale


def refresh_bridges(conn: Connection, plan: BridgeRefresh, msg_id: int, now: datetime) -> list[OutboxRow]:
    """Write the ABDG records and re-derive every live flight they affect, in the message's
    transaction 1."""
    before = read_bridges(conn)
    write_reference(conn, plan.ref, msg_id, now)
    mapping = read_bridges(conn)
    stale = stale_flights(conn, mapping, changed_stands(before, mapping))
    events = refresh_flights(conn, stale, lambda state: derive(state, mapping), msg_id=msg_id, meta=plan.meta,
                             now=now)
    if stale:
        log.info("mailbox id %s ABDG/%s re-derived the airbridges of %d flight(s)", msg_id, plan.meta.styp,
                 len(stale))
    return events


@dataclass(frozen=True)
class MappingStatus:
    """For the asset check (US-14 AC3): is the mapping known, and how many live flights name a
    stand whose airbridges are published as null."""

    loaded: bool
    flights_unknown: int

    def as_metadata(self) -> dict[str, bool | int]:
        return {"abdg_loaded": self.loaded, "flights_with_abdg_null": self.flights_unknown}


_UNKNOWN_SQL = (
    "SELECT EXISTS (SELECT 1 FROM ref_load WHERE rtype = %(rtype)s), count(*) FROM flight_schd f "
    "WHERE NOT f.deleted AND f.stand_bridges IS NULL AND (f.stnd IS NOT NULL OR EXISTS "
    "(SELECT 1 FROM flight_stand_plan p WHERE p.flid = f.flid AND p.psst IS NOT NULL))")


def mapping_status(conn: Connection) -> MappingStatus:
    loaded, unknown = conn.exec_driver_sql(_UNKNOWN_SQL, {"rtype": ABDG}).one()
    return MappingStatus(bool(loaded), int(unknown))
