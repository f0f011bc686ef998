"""Rows sent as one JSON array: one parameter per statement, however many rows and columns.

psycopg re-parses a statement with more than 50 parameters on every call and adapts each value
in Python, and ``executemany`` sends one statement per row; a JSON array costs one ``orjson.dumps``
(C) and the server expands it with ``json_populate_recordset`` (the pump's upsert, the
snapshot's 10,000 main rows and their detail rows, the outbox events). Row order is kept
(``WITH ORDINALITY``), so serial ids follow it.

Thousands of rows at once (a snapshot's 10,000 main rows, ~90,000 detail rows and 10,000 events)
go by ``COPY`` instead (``copy_rows``, ``copy_upsert``): psycopg writes each row in C and
the server skips JSON parsing, where the JSON array cost a dict, its encoding and a
``json_populate_recordset`` per row. ``COPY`` cannot run inside a pipeline (the pump's per-message
writes), so the callers keep the JSON path for small batches and whenever ``copy_rows`` declines.

``COPY`` goes in PostgreSQL's binary format when the caller says its values are all of their
columns' types (``binary=True``; decision P31, binary COPY and FLID arrays): each column's type comes from the table's
metadata (``store.tables``), psycopg writes a text as its bytes and a number as its bytes, with
no escaping and no digits, and the server parses nothing. A snapshot's 110,000 rows cost the pump
about half the CPU they cost as text. A value of another type than its column's (a number for a
text, a ``datetime`` without a time zone for a ``timestamptz``) fails the statement, where the
text format would have let the server convert it: callers pass ``binary`` only for rows they build
themselves from typed state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import date
from functools import cache

import orjson
import psycopg
from psycopg.adapt import Dumper
from psycopg.types.json import Jsonb
from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql

from msgx_engine.db import as_dbapi_errors
from msgx_engine.store.tables import metadata

COPY_MIN_ROWS = 500     # below this a JSON array is as cheap and may travel in a pipeline


def insert_sql(table: str, columns: Sequence[str], conflict: str = "") -> str:
    """``INSERT INTO table (columns)`` from the JSON array parameter ``%(rows)s``, in array order;
    ``conflict``: an ``ON CONFLICT …`` clause."""
    cols = ", ".join(columns)
    sql = (f"INSERT INTO {table} ({cols}) SELECT {cols} FROM json_populate_recordset(NULL::{table}, "
           "%(rows)s::json) WITH ORDINALITY ORDER BY ordinality")
    return f"{sql} {conflict}" if conflict else sql


def rows_param(rows: Sequence[Mapping[str, object]]) -> dict[str, str]:
    """The ``%(rows)s`` parameter of ``insert_sql`` (the keys may be SQLAlchemy column names, a
    subclass of str: hence orjson's ``OPT_NON_STR_KEYS``). NULL columns are left out (a missing key is
    NULL to ``json_populate_recordset``): a main row is mostly NULLs, and 10,000 of them shrink
    from 11 MB of JSON to under 3 MB."""
    return {"rows": orjson.dumps([{k: v for k, v in r.items() if v is not None} for r in rows],
                                 default=_json_value, option=orjson.OPT_NON_STR_KEYS).decode()}


def _json_value(value: object) -> object:
    """JSON for the values JSON has no type for: JSONB wrappers (their object), and dates and
    timestamps (ISO 8601, with the offset, read back exactly) where orjson, which writes them
    itself in that form, is not the writer."""
    if isinstance(value, Jsonb):
        return value.obj
    if isinstance(value, date):
        return value.isoformat()
    raise TypeError(f"no JSON for {type(value).__name__}")


def _copyable(conn: Connection) -> psycopg.Connection | None:
    """The psycopg connection under ``conn`` when COPY may run on it now (not in a pipeline)."""
    raw = conn.connection.driver_connection
    if not isinstance(raw, psycopg.Connection) or raw.pgconn.pipeline_status != psycopg.pq.PipelineStatus.OFF:
        return None
    return raw


def copy_rows(conn: Connection, table: str, columns: Sequence[str], rows: Iterable[Sequence[object]], *,
              binary: bool = False) -> bool:
    """``COPY table (columns)`` from ``rows`` (value tuples in column order) in the caller's
    transaction; False (nothing written) when COPY cannot run here: the caller writes them
    otherwise. Rows keep their order, so serial ids follow it. ``binary``: every value is of its
    column's type (or None), so the rows go in the binary format."""
    raw = _copyable(conn)
    if raw is None:
        return False
    with as_dbapi_errors(raw), raw.cursor() as cur:
        _copy(cur, table, columns, rows, column_types(table, tuple(columns)) if binary else None)
    return True


def _copy(cur: psycopg.Cursor, table: str, columns: Sequence[str], rows: Iterable[Sequence[object]],
          types: tuple[str, ...] | None) -> None:
    binary = " (FORMAT BINARY)" if types is not None else ""
    with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN{binary}") as cp:
        if types is not None:
            cp.set_types(types)
        for row in rows:
            cp.write_row(row)


_DIALECT = postgresql.dialect()


@cache
def column_types(table: str, columns: tuple[str, ...]) -> tuple[str, ...]:
    """The PostgreSQL type names of ``table``'s ``columns``, from the metadata (``store.tables``)."""
    known = metadata.tables[table].c
    return tuple(known[name].type.compile(dialect=_DIALECT).lower() for name in columns)


@cache
def _upsert_from_sql(table: str, columns: tuple[str, ...], conflict: str) -> tuple[str, str, str]:
    temp = f"copy_{table}"
    cols = ", ".join(columns)
    return (f"CREATE TEMP TABLE {temp} (LIKE {table} INCLUDING DEFAULTS) ON COMMIT DROP",
            f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {temp} {conflict}", f"DROP TABLE {temp}")


def copy_upsert(conn: Connection, table: str, columns: tuple[str, ...], rows: Iterable[Sequence[object]],
                conflict: str, *, binary: bool = False) -> bool:
    """``COPY`` into a temporary copy of ``table``, then one ``INSERT … SELECT … conflict`` from it
    (the temporary table is dropped at once, and by the commit or rollback anyway); False when
    COPY cannot run here. ``binary``: as for ``copy_rows``."""
    raw = _copyable(conn)
    if raw is None:
        return False
    create, upsert, drop = _upsert_from_sql(table, columns, conflict)
    with as_dbapi_errors(raw), raw.cursor() as cur:
        cur.execute(create)
        _copy(cur, f"copy_{table}", columns, rows, column_types(table, columns) if binary else None)
        cur.execute(upsert)
        cur.execute(drop)
    return True


class TextArray(list[str]):
    """Texts sent as one ``text[]`` parameter whose literal is built by ``str.join`` (C), where
    psycopg's list dumper adapts element by element in Python: 15 ms of the pump's CPU for each
    10,000-FLID list a snapshot sends (its heads, its members, its code-share families; P31)."""


class _TextArrayDumper(Dumper):
    oid = psycopg.adapters.types["text"].array_oid

    def dump(self, obj: TextArray) -> bytes:
        if not obj:
            return b"{}"
        items: list[str] = obj
        if '"' in (whole := "".join(obj)) or "\\" in whole:     # escaped inside the quotes
            items = [item.replace("\\", "\\\\").replace('"', '\\"') for item in obj]
        encoding = self.connection.info.encoding if self.connection is not None else "utf-8"
        return ('{"' + '","'.join(items) + '"}').encode(encoding)


psycopg.adapters.register_dumper(TextArray, _TextArrayDumper)
