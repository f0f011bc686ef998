"""The snapshot reconciliation's data work, set-based inside the snapshot's transaction 1.

Loading 10,000 whole states into Python to compare them costs several times the snapshot itself
(every detail row travels as JSON), so the comparison stays in PostgreSQL:

1. ``keep_before`` copies, before the snapshot writes, the rows of the live flights it takes over
   into temporary tables (``recon_<table>``, dropped at commit or rollback): server-side copies,
   nothing travels;
2. after the write, ``differences`` compares the copies with the written rows in one statement
   and returns only the (FLID, field) pairs that differ: a scalar by its column, an exception
   object by its columns together, a text group by its JSON column, a collection by its rows
   matched by ordinal (sequence attribute and every column; a row only on one side differs);
3. ``keep_unchanged`` puts the old version back on the flights the snapshot rewrote without a
   change (US-06 AC5: an equal snapshot changes no version and emits nothing);
4. ``before_states`` loads the old whole states of the few example flights from the copies.

The pure report (``handlers.reconcile``) is built from those.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import Connection

from msgx_engine.sis.fields import COLLECTIONS, OBJECTS, SCALARS, TEXT_GROUPS
from msgx_engine.state.model import FlightState
from msgx_engine.store.bulk import TextArray
from msgx_engine.store.flights import FlightRepository
from msgx_engine.store.tables import detail_tables

PREFIX = "recon_"
_MAIN = f"{PREFIX}flight_schd"


def _main_fields() -> list[tuple[str, tuple[str, ...]]]:
    """(field, its columns) for every field kept in the main row."""
    fields: list[tuple[str, tuple[str, ...]]] = [(name, (name.lower(),)) for name in SCALARS]
    fields += [(obj.key, obj.columns) for obj in OBJECTS]
    fields += [(group.key, (group.column,)) for group in TEXT_GROUPS]
    return sorted(fields)


def _distinct(cols: Sequence[str]) -> str:
    return f"({', '.join('o.' + c for c in cols)}) IS DISTINCT FROM ({', '.join('n.' + c for c in cols)})"


def _differences_sql() -> str:
    """One statement: per compared flight whose main row changed at all (one row comparison
    first: a re-snapshot's flights are mostly unchanged), the main-row fields that changed (one
    array per row, unnested), then per collection the flights with a row that changed, appeared or went (rows
    matched by ordinal; the ordinal itself is compared so a missing side always differs)."""
    main = _main_fields()
    cases = ", ".join(f"CASE WHEN {_distinct(cols)} THEN '{field}' END" for field, cols in main)
    changed = _distinct([c for _, cols in main for c in cols])     # most rows: equal, one test (P24, orjson and new-day
                                                                   # rows)
    parts = [f"SELECT flid, field FROM (SELECT o.flid, ARRAY[{cases}] AS fields FROM {_MAIN} o "
             f"JOIN flight_schd n USING (flid) WHERE {changed}) d, unnest(d.fields) AS field WHERE field IS NOT NULL"]
    for spec in COLLECTIONS:
        kind = f" WHERE t.route_kind = '{spec.route_kind}'" if spec.route_kind else ""
        old = f"SELECT t.* FROM {PREFIX}{spec.table} t{kind}"
        new = f"SELECT t.* FROM {spec.table} t JOIN {_MAIN} USING (flid){kind}"
        parts.append(f"SELECT DISTINCT coalesce(o.flid, n.flid), '{spec.key}' FROM ({old}) o FULL JOIN ({new}) n "
                     f"ON o.flid = n.flid AND o.ordinal = n.ordinal "
                     f"WHERE {_distinct(('ordinal', 'source_seq', *spec.columns))}")
    return " UNION ALL ".join(parts)


_KEEP_MAIN_SQL = (f"CREATE TEMP TABLE {_MAIN} ON COMMIT DROP AS SELECT * FROM flight_schd "
                  "WHERE flid = ANY(%(flids)s) AND NOT deleted")
_KEEP_DETAIL_SQL = [f"CREATE TEMP TABLE {PREFIX}{name} ON COMMIT DROP AS SELECT t.* FROM {name} t "
                    f"JOIN {_MAIN} USING (flid)" for name in detail_tables]
_COMPARED_SQL = f"SELECT flid FROM {_MAIN}"
_DIFFERENCES_SQL = _differences_sql()


def keep_before(conn: Connection, flids: Sequence[str]) -> list[str]:
    """Copy the live rows of ``flids`` before they are rewritten; the FLIDs copied (the compared ones)."""
    conn.exec_driver_sql(_KEEP_MAIN_SQL, {"flids": TextArray(flids)})
    for sql in _KEEP_DETAIL_SQL:
        conn.exec_driver_sql(sql)
    return sorted(r[0] for r in conn.exec_driver_sql(_COMPARED_SQL))


def differences(conn: Connection) -> list[tuple[str, str]]:
    """(FLID, field) for every field the written rows changed, compared with the copies."""
    return [(flid, field) for flid, field in conn.exec_driver_sql(_DIFFERENCES_SQL)]


_UNCHANGED_SQL = (f"UPDATE flight_schd n SET state_version = o.state_version, last_message_id = o.last_message_id, "
                  f"updated_at = o.updated_at FROM {_MAIN} o WHERE n.flid = o.flid AND n.flid = ANY(%(flids)s) "
                  "AND NOT n.deleted AND n.fday IS NOT DISTINCT FROM o.fday RETURNING n.flid")


def keep_unchanged(conn: Connection, compared: Sequence[str], pairs: Iterable[tuple[str, str]]) -> set[str]:
    """Give the compared flights the snapshot wrote without changing a field (and without moving
    them to another day) their old version and last message back; those FLIDs.

    An equal snapshot under a new SEQN changes no version and emits nothing (US-06 AC5): its rows
    were rewritten with the same content, so only the bookkeeping the write advanced is put back.
    The per-key stamps stay the snapshot's: it is the last writer of those values (F6, last writer wins)."""
    changed = {flid for flid, _ in pairs}
    same = [flid for flid in compared if flid not in changed]
    if not same:
        return set()
    return {r[0] for r in conn.exec_driver_sql(_UNCHANGED_SQL, {"flids": TextArray(same)})}


def before_states(conn: Connection, flids: Iterable[str]) -> dict[str, FlightState]:
    """The whole states of ``flids`` as they were before the snapshot (from the copies)."""
    return FlightRepository(conn, read_prefix=PREFIX).load(flids)

