"""Flight repository: batched reads of whole states and the one writer path ``persist_next_states``.

Reads load any number of flights in a constant number of statements (one for ``flight_schd``,
one per detail table). Writes rewrite a flight's whole row and every detail group (FS §5.4), so
what is stored always equals the merged in-memory state.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from datetime import date, datetime
from functools import cache
from types import MappingProxyType
from typing import Any, cast

import orjson
from psycopg.types.json import Jsonb
from sqlalchemy import Connection, func, select

from msgx_engine.handlers.codeshare import ChildRef
from msgx_engine.sis.fields import COLLECTIONS, OBJECTS, SCALARS, TEXT_GROUPS, CollectionSpec
from msgx_engine.state.bridges import from_column, to_column
from msgx_engine.state.model import FlightState, Value, freeze_entry
from msgx_engine.store import bulk
from msgx_engine.store.tables import detail_tables, flight_schd

_BOOK_COLUMNS = ("flid", "fday", "state_version", "last_message_id", "deleted", "deleted_at")


def _entry_to_row(spec: CollectionSpec, flid: str, ordinal: int, entry, version: int) -> dict:
    row: dict[str, object] = {c: None for c in spec.columns}
    row.update(flid=flid, ordinal=ordinal, record_version=version, source_seq=None)
    if spec.route_kind:
        row["route_kind"] = spec.route_kind
    for key, value in entry.items():
        if key == spec.seq_attr:
            row["source_seq"] = value
            continue
        col = key.lower()
        if col not in row or col in ("flid", "ordinal", "record_version", "route_kind"):
            raise ValueError(f"{spec.key} entry key {key!r} has no column in {spec.table}")
        row[col] = value
    return row


def _row_to_entry(spec: CollectionSpec, m: Mapping[str, Any]) -> dict[str, str]:
    """A detail row (as a column -> value mapping) back to a state entry."""
    entry: dict[str, str] = {}
    if spec.seq_attr and m["source_seq"] is not None:
        entry[spec.seq_attr] = m["source_seq"]
    for part in spec.children + spec.attrs:
        value = m[part.lower()]
        if value is not None:
            entry[part] = value
    if spec.text and m["text"] is not None:
        entry["TEXT"] = m["text"]
    return entry


# A batch of at most this many flights reads its detail rows one flight at a time through each
# table's primary key (its first column is ``flid``), whatever PostgreSQL's statistics say; a larger
# one (a day's snapshot, a whole-store read) lets the planner join (P39, group reads by key).
BY_KEY_MAX = 512


@cache
def _load_sql(prefix: str = "", for_update: bool = False, by_key: bool = False) -> str:
    """The main rows of ``flids`` and every detail row of theirs from all 9 tables, in one
    statement (one round trip): each row as one JSON value tagged with its table (``''``
    for the main row, NULL columns stripped: a ~75-column row costs the driver far less as one
    column than as 75), main rows first, then in (table, flid, ordinal) order. ``for_update``
    locks the main rows. ``prefix`` reads copies of the tables (``<prefix><table>``) instead.

    ``by_key``: each main row's detail rows are read by that flight's key (a nested loop the
    planner cannot flatten, ``OFFSET 0``). Without it a detail table whose statistics are missing
    or stale (never analysed: autovacuum off, a restored dump; or analysed before a burst of
    changes) is estimated from its pages, dead rows included, and read whole into a hash join: a
    flight changed a hundred times in a few minutes left a hundred dead versions of its rows, and
    every group's read grew with them (P39)."""
    lock = " FOR UPDATE" if for_update else ""
    main = (f"WITH m AS (SELECT f.flid, json_strip_nulls(to_json(f.*)) AS row FROM {prefix}flight_schd f "
            f"WHERE f.flid = ANY(%(flids)s){lock}) SELECT '' AS tbl, m.flid, 0 AS ordinal, m.row FROM m")
    if by_key:
        parts = [f"SELECT '{name}', t.flid, t.ordinal, to_json(t.*) FROM m CROSS JOIN LATERAL "
                 f"(SELECT * FROM {prefix}{name} d WHERE d.flid = m.flid OFFSET 0) t" for name in detail_tables]
    else:
        parts = [f"SELECT '{name}', t.flid, t.ordinal, to_json(t.*) FROM {prefix}{name} t "
                 "WHERE t.flid IN (SELECT flid FROM m)" for name in detail_tables]
    return " UNION ALL ".join([main, *parts]) + " ORDER BY tbl, flid, ordinal"


@cache
def _delete_sql(tables: tuple[str, ...]) -> str:
    """One statement deleting a batch's rows from the given detail tables (data-modifying CTEs)."""
    ctes = ", ".join(f"del_{name} AS (DELETE FROM {name} WHERE flid = ANY(%(flids)s))" for name in tables)
    return f"WITH {ctes} SELECT 1"


def collections_of(state: FlightState | None) -> tuple[object, ...] | None:
    """The values a flight keeps in the detail tables (None: no stored flight)."""
    return None if state is None else tuple(state.fields.get(spec.key) for spec in COLLECTIONS)


def _tables_holding(states: Iterable[FlightState]) -> set[str]:
    return {spec.table for st in states for spec in COLLECTIONS if st.fields.get(spec.key)}


def _all_unstored(states: Sequence[FlightState], unstored: Collection[str]) -> bool:
    """Every state is of a flight with no stored row, hence no detail rows (P21, output floor and writer savings): the
    caller knows it (its load found none), never the state's version, which is also 1 for the restore of a
    tombstone FDEL left for a flight never stored, a row that may hold hidden detail rows."""
    return all(st.flid in unstored for st in states)


def _tables_to_clear(states: Sequence[FlightState], previous: Mapping[str, FlightState] | None,
                     unstored: Collection[str]) -> tuple[str, ...]:
    """The detail tables that may hold rows of the flights ``states`` rewrite. None when no flight
    has a stored row (``unstored``: a new day's snapshot skips the DELETE of its 10,000 flights);
    all 9 when the stored states were not loaded (or one is missing); else the tables the loaded
    ones fill."""
    if _all_unstored(states, unstored):
        return ()
    if previous is None or any(st.flid not in previous and st.flid not in unstored for st in states):
        return tuple(detail_tables)
    holding = _tables_holding(previous[st.flid] for st in states if st.flid in previous)
    return tuple(t for t in detail_tables if t in holding)


# The hot statements as plain SQL, built once from the table metadata and sent with
# ``exec_driver_sql``: no per-call statement construction or compilation (DESIGN §6 budgets).
_MAIN_COLUMNS = tuple(c.name for c in flight_schd.c if c.name != "created_at")
# Rows travel as one JSON array each (store/bulk.py): one statement per table, whatever the count.
_UPSERT_SQL = bulk.insert_sql("flight_schd", _MAIN_COLUMNS, "ON CONFLICT (flid) DO UPDATE SET " + ", ".join(
    f"{c} = EXCLUDED.{c}" for c in _MAIN_COLUMNS if c != "flid"))
_DETAIL_INSERT_SQL = {name: bulk.insert_sql(name, tuple(c.name for c in t.c if c.name != "created_at"))
                      for name, t in detail_tables.items()}


# On the hot path for every new flight (D30, code-share cascade: children may already wait for it): plain SQL.
_CHILDREN_SQL = ("SELECT maid, flid, alcd, flno FROM flight_schd WHERE maid = ANY(%(masters)s) AND NOT deleted "
                 "ORDER BY maid, flid")

_SPECS_BY_TABLE: dict[str, list[CollectionSpec]] = defaultdict(list)
for _spec in COLLECTIONS:
    _SPECS_BY_TABLE[_spec.table].append(_spec)

# The COPY path of large batches (a snapshot; store/bulk.py): value lists in ``_MAIN_COLUMNS`` order.
_UPSERT_CONFLICT = "ON CONFLICT (flid) DO UPDATE SET " + ", ".join(
    f"{c} = EXCLUDED.{c}" for c in _MAIN_COLUMNS if c != "flid")
_DETAIL_COLUMNS = {name: tuple(c.name for c in t.c if c.name != "created_at") for name, t in detail_tables.items()}
_FIXED = ("flid", "ordinal", "record_version", "route_kind")


@cache
def _entry_slots(spec: CollectionSpec) -> tuple[dict[str, int], tuple[int, int, int], int | None]:
    """Where each entry key goes in a ``_DETAIL_COLUMNS`` tuple (the rule of ``_entry_to_row``:
    the sequence attribute to ``source_seq``, any other key to its lower-cased column), the slots
    of ``flid``, ``ordinal`` and ``record_version``, and the slot of ``route_kind``."""
    columns = _DETAIL_COLUMNS[spec.table]
    slots = {c.upper(): i for i, c in enumerate(columns) if c not in _FIXED}
    if spec.seq_attr:
        slots[spec.seq_attr] = columns.index("source_seq")
    fixed = (columns.index("flid"), columns.index("ordinal"), columns.index("record_version"))
    return slots, fixed, columns.index("route_kind") if spec.route_kind else None


def _detail_tuples(states: Sequence[FlightState], table: str,
                   versions: Mapping[str, int] | None = None) -> Iterator[list[object]]:
    """The detail rows of ``table`` for ``states`` as value lists in ``_DETAIL_COLUMNS`` order
    (``versions``: a flight's ``record_version`` when it is not its state's own). A snapshot
    builds about 90,000: each row is a copy of its group's template, and an entry key
    without a column is caught by its slot lookup failing, not by a test of every entry."""
    versions = versions or {}
    width = len(_DETAIL_COLUMNS[table])
    for spec in _SPECS_BY_TABLE[table]:
        slots, (at_flid, at_ordinal, at_version), kind_slot = _entry_slots(spec)
        key = spec.key
        template: list[object] = [None] * width
        if kind_slot is not None:
            template[kind_slot] = spec.route_kind
        for state in states:
            entries: tuple[Mapping[str, str], ...] | None = state.fields.get(key)   # type: ignore[assignment]
            if not entries:
                continue
            flid = state.flid
            version = versions.get(flid, state.state_version)
            for ordinal, entry in enumerate(entries, start=1):
                row = template.copy()
                row[at_flid], row[at_ordinal], row[at_version] = flid, ordinal, version
                try:
                    for part, value in entry.items():
                        row[slots[part]] = value
                except KeyError as unknown:
                    raise ValueError(f"{key} entry key {unknown.args[0]!r} has no column in {spec.table}") from None
                yield row


_COLLECTION_KEYS = tuple(spec.key for spec in COLLECTIONS)


def _entries_reach(states: Sequence[FlightState], n: int) -> bool:
    """Whether ``states`` hold at least ``n`` collection entries (detail rows) in all. Counting
    stops there: a snapshot's 10,000 flights reach COPY's threshold in the first few dozen."""
    total = 0
    for state in states:
        fields = state.fields
        for key in _COLLECTION_KEYS:
            entries = fields.get(key)
            if entries:
                total += len(entries)
        if total >= n:
            return True
    return False


_MAIN_SLOT = {c: i for i, c in enumerate(_MAIN_COLUMNS)}
_SCALAR_SLOT = {name: _MAIN_SLOT[name.lower()] for name in SCALARS}
_OBJECT_SLOTS = tuple((obj.key, frozenset(obj.parts), tuple((part, _MAIN_SLOT[col]) for part, col
                                                            in zip(obj.parts, obj.columns, strict=True)))
                      for obj in OBJECTS)
_TEXT_SLOTS = tuple((group.key, _MAIN_SLOT[group.column]) for group in TEXT_GROUPS)
_BOOK_SLOTS = tuple(_MAIN_SLOT[c] for c in (*_BOOK_COLUMNS, "stand_bridges", "field_msg", "updated_at"))


def _json_text(value: object) -> str:
    """The stamps' JSON by orjson (C): psycopg's default, the standard library's, cost a snapshot
    about 20 ms for its 10,000 main rows (P31, binary COPY and FLID arrays)."""
    return orjson.dumps(value).decode()


def main_values(state: FlightState, now: datetime | None = None) -> list[object]:
    """The ``flight_schd`` row of a state as values in ``_MAIN_COLUMNS`` order (``updated_at`` is
    ``now``). A snapshot builds 10,000 at once and hands them to COPY as they are: the
    slots come from tables built once, and only the fields a state holds are walked, not every
    column."""
    row: list[object] = [None] * len(_MAIN_COLUMNS)
    book: tuple[object, ...] = (state.flid, state.fday, state.state_version, state.last_message_id, state.deleted,
                                now if state.deleted else None, to_column(state.bridges),
                                Jsonb(dict(state.stamps), dumps=_json_text) if state.stamps else None, now)
    for at, value in zip(_BOOK_SLOTS, book, strict=True):
        row[at] = value
    for name, field in state.fields.items():
        slot = _SCALAR_SLOT.get(name)
        if slot is not None:
            row[slot] = field
    for key, known, slots in _OBJECT_SLOTS:
        parts = state.entry(key)
        if not parts:
            continue
        unknown = set(parts) - known
        if unknown:
            raise ValueError(f"{key} has parts without a column: {sorted(unknown)}")
        for part, slot in slots:
            row[slot] = parts.get(part)
    for key, slot in _TEXT_SLOTS:
        entries = state.entries(key)
        if entries:
            row[slot] = json.dumps([dict(e) for e in entries], ensure_ascii=False, sort_keys=True)
    return row


def state_to_row(state: FlightState, now: datetime | None = None) -> dict:
    """The ``flight_schd`` row of a state as a column -> value mapping, ``updated_at`` left out."""
    row = dict(zip(_MAIN_COLUMNS, main_values(state, now), strict=True))
    del row["updated_at"]
    return row


_SCALAR_BY_COLUMN = {name.lower(): name for name in SCALARS}


def row_to_fields(m: Mapping[str, Any]) -> dict[str, Value]:
    """A main row (column -> value, NULL columns may be absent) back to state fields."""
    fields: dict[str, Value] = {}
    for col, value in m.items():
        name = _SCALAR_BY_COLUMN.get(col)
        if name is not None and value is not None:
            fields[name] = value
    for obj in OBJECTS:
        parts = {p: m[c] for p, c in zip(obj.parts, obj.columns, strict=True) if m.get(c) is not None}
        if parts:
            fields[obj.key] = freeze_entry(parts)
    for group in TEXT_GROUPS:
        raw = m.get(group.column)
        if raw:
            fields[group.key] = tuple(freeze_entry(e) for e in json.loads(raw))
    return fields


def _as_dict(value: object) -> dict[str, Any]:
    """A JSON column as psycopg hands it over: already a dict, or its text."""
    return json.loads(value) if isinstance(value, str) else cast("dict[str, Any]", value)


class FlightRepository:
    """Reads and writes flight states on a caller-owned connection (the unit of work)."""

    def __init__(self, conn: Connection, *, read_prefix: str = "") -> None:
        """``read_prefix``: ``load`` reads copies of the tables named ``<prefix><table>`` (the
        snapshot reconciliation's copies of the states before the snapshot)."""
        self.conn = conn
        self.read_prefix = read_prefix

    def load(self, flids: Iterable[str], *, for_update: bool = False) -> dict[str, FlightState]:
        """Whole states of the given flights (deleted ones included, flagged) in 1 statement: the
        main rows and every detail row of all 9 tables in one UNION ALL (FS §9)."""
        wanted = sorted(set(flids))
        if not wanted:
            return {}
        rows: list[dict[str, Any]] = []
        fields_by_flid: dict[str, dict[str, Value]] = {}
        grouped: dict[tuple[str, str], list] = defaultdict(list)
        for tbl, flid, _ordinal, raw in self.conn.exec_driver_sql(_load_sql(self.read_prefix, for_update,
                                                                            len(wanted) <= BY_KEY_MAX),
                                                                  {"flids": bulk.TextArray(wanted)}):
            row = _as_dict(raw)
            if not tbl:
                rows.append(row)
                fields_by_flid[flid] = row_to_fields(row)
                continue
            spec = next(s for s in _SPECS_BY_TABLE[tbl] if s.route_kind in (None, row.get("route_kind")))
            grouped[(flid, spec.key)].append(freeze_entry(_row_to_entry(spec, row)))
        for (flid, key), entries in grouped.items():
            fields_by_flid[flid][key] = tuple(entries)
        states: dict[str, FlightState] = {}
        for r in rows:
            flid = r["flid"]
            fday = r.get("fday")
            states[flid] = FlightState(
                flid=flid, fields=MappingProxyType(dict(sorted(fields_by_flid[flid].items()))),
                fday=date.fromisoformat(fday) if fday else None, state_version=r["state_version"],
                last_message_id=r.get("last_message_id"), deleted=r["deleted"],
                bridges=from_column(r.get("stand_bridges")),
                stamps=MappingProxyType(dict(sorted(r.get("field_msg", {}).items()))))
        return states

    def load_all_current(self, *, exclude_codeshare: bool = True) -> list[FlightState]:
        """Every non-deleted flight (US-12), in one transaction: ids first, then one batched load."""
        q = select(flight_schd.c.flid).where(flight_schd.c.deleted.is_(False))
        if exclude_codeshare:
            q = q.where(flight_schd.c.maid.is_(None))
        flids = [r[0] for r in self.conn.execute(q.order_by(flight_schd.c.flid))]
        states = self.load(flids)
        return [states[f] for f in flids]

    def persist_next_states(self, states: Sequence[FlightState], *, now: datetime | None = None,
                            previous: Mapping[str, FlightState] | None = None,
                            detail_versions: Mapping[str, int] | None = None,
                            unstored: Collection[str] = frozenset()) -> None:
        """The single writer path: upsert main rows, then rewrite every detail group.

        ``now`` stamps ``updated_at``/``deleted_at``; callers pass their clock's time (the
        database's clock is read only when they do not). ``previous`` are the states the caller
        loaded in this transaction: with them, only the flights whose collections moved get their
        detail rows rewritten, and only in the tables that held or will hold rows for them (a new
        flight has none to delete; a silent write of stamps has none to rewrite); without them, all 9.
        ``detail_versions``: the ``record_version`` of a flight's detail rows when it is not the
        state's own (the version whose message last moved them, P13, write-behind).
        ``unstored``: the flights the caller knows have no stored row (its load found none). They
        get no DELETE of detail rows, and a large batch of nothing else is COPYed straight into
        ``flight_schd`` (P21, P24, orjson and new-day rows). Any other flight is taken as stored,
        whatever its version: a tombstone FDEL left for a flight never stored is restored at version 1 and may hold
        detail rows a hidden write put under it (decision C2, unstored flights).
        """
        if not states:
            return
        if len({st.flid for st in states}) < len(states):     # one row per flight: its last state
            states = list({st.flid: st for st in states}.values())
        if now is None:
            now = self.conn.execute(select(func.now())).scalar_one()
        # built as COPY sends them: the server stores each row while the next is built (P29, rows built while COPY
        # sends)
        rows = (main_values(s, now) for s in states)
        if len(states) < bulk.COPY_MIN_ROWS or not self._copy_main_rows(rows, first=_all_unstored(states, unstored),
                                                                         binary=now.tzinfo is not None):
            self.conn.exec_driver_sql(_UPSERT_SQL, bulk.rows_param([dict(zip(_MAIN_COLUMNS, r, strict=True))
                                                                    for r in rows]))
        if previous is not None:     # a flight whose collections did not move keeps its detail rows
            states = [st for st in states if collections_of(st) != collections_of(previous.get(st.flid))]
            if not states:
                return
        tables = _tables_to_clear(states, previous, unstored)
        if tables:
            self.conn.exec_driver_sql(_delete_sql(tables), {"flids": bulk.TextArray(
                s.flid for s in states if s.flid not in unstored)})
        if _entries_reach(states, bulk.COPY_MIN_ROWS):
            if all(bulk.copy_rows(self.conn, name, _DETAIL_COLUMNS[name], _detail_tuples(states, name, detail_versions),
                                  binary=True) for name in _SPECS_BY_TABLE):
                return
        inserts: dict[str, list[dict]] = defaultdict(list)
        for state in states:
            for spec in COLLECTIONS:
                entries = state.fields.get(spec.key) or ()
                version = (detail_versions or {}).get(state.flid, state.state_version)
                for ordinal, entry in enumerate(entries, start=1):
                    inserts[spec.table].append(_entry_to_row(spec, state.flid, ordinal, entry, version))
        for table_name, table_rows in inserts.items():
            self.conn.exec_driver_sql(_DETAIL_INSERT_SQL[table_name], bulk.rows_param(table_rows))

    def _copy_main_rows(self, rows: Iterable[list[object]], *, first: bool, binary: bool) -> bool:
        """The main rows by COPY (False: COPY cannot run here). ``first``: no row's flight is
        stored (the caller's ``unstored``, P21), so COPY writes them into ``flight_schd`` itself, where
        an upsert would copy them into a temporary table and insert them from there (P24, orjson and new-day rows). Were
        a row stored after all, the insert fails on the key and the message is retried or DEAD: it
        never overwrites in silence. ``binary``: ``now`` has its time zone, so every value is of
        its column's type (P31)."""
        if first:
            return bulk.copy_rows(self.conn, "flight_schd", _MAIN_COLUMNS, rows, binary=binary)
        return bulk.copy_upsert(self.conn, "flight_schd", _MAIN_COLUMNS, rows, _UPSERT_CONFLICT, binary=binary)

    def codeshare_children(self, masters: Iterable[str]) -> dict[str, tuple[ChildRef, ...]]:
        """The live code-share children (``MAID`` = master FLID, the authoritative link, INV-21)
        of each of ``masters``, in one statement (partial index ``flight_schd_maid_idx``). Every master asked
        for is a key, with ``()`` when it has none: the derived MAFL needs to know it looked."""
        wanted = sorted(set(masters))
        if not wanted:
            return {}
        rows = self.conn.exec_driver_sql(_CHILDREN_SQL, {"masters": bulk.TextArray(wanted)})
        children: dict[str, list[ChildRef]] = {m: [] for m in wanted}
        for maid, flid, alcd, flno in rows:
            children[maid].append(ChildRef(flid, alcd, flno))
        return {m: tuple(refs) for m, refs in children.items()}

    def exists(self, flids: Iterable[str]) -> set[str]:
        wanted = list(set(flids))
        if not wanted:
            return set()
        return {r[0] for r in self.conn.execute(select(flight_schd.c.flid).where(flight_schd.c.flid.in_(wanted)))}
