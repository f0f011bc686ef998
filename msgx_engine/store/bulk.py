"""Rows sent as one JSON array: one parameter per statement, however many rows and columns.

psycopg re-parses a statement with more than 50 parameters on every call and adapts each value
in Python, and ``executemany`` sends one statement per row; a JSON array costs one ``json.dumps``
(C) and the server expands it with ``json_populate_recordset`` (issue 16: the pump's upsert, the
snapshot's 10,000 main rows and their detail rows, the outbox events). Row order is kept
(``WITH ORDINALITY``), so serial ids follow it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import date

from psycopg.types.json import Jsonb


def insert_sql(table: str, columns: Sequence[str], conflict: str = "") -> str:
    """``INSERT INTO table (columns)`` from the JSON array parameter ``%(rows)s``, in array order;
    ``conflict``: an ``ON CONFLICT …`` clause."""
    cols = ", ".join(columns)
    sql = (f"INSERT INTO {table} ({cols}) SELECT {cols} FROM json_populate_recordset(NULL::{table}, "
           "%(rows)s::json) WITH ORDINALITY ORDER BY ordinality")
    return f"{sql} {conflict}" if conflict else sql


def rows_param(rows: Sequence[Mapping[str, object]]) -> dict[str, str]:
    """The ``%(rows)s`` parameter of ``insert_sql``. NULL columns are left out (a missing key is
    NULL to ``json_populate_recordset``): a main row is mostly NULLs, and 10,000 of them shrink
    from 11 MB of JSON to under 3 MB."""
    return {"rows": json.dumps([{k: v for k, v in r.items() if v is not None} for r in rows],
                               default=_json_value, ensure_ascii=False)}


def _json_value(value: object) -> object:
    """JSON for the values JSON has no type for: dates and timestamps (ISO 8601, with the offset,
    read back exactly), JSONB wrappers (their object)."""
    if isinstance(value, Jsonb):
        return value.obj
    if isinstance(value, date):
        return value.isoformat()
    raise TypeError(f"no JSON for {type(value).__name__}")
