"""A year of flights in the store before the soak measures: copies of the flights already stored.

msgx keeps every flight a day owns (archiving removes only unowned and deleted ones), so an
airport's store holds about a year of days, 300,000-400,000 flights, while a soak of 1,000,000
messages simulates ten to twenty of them. ``store_history`` copies the flights stored so far (the
first simulated day's, main rows and every detail table) under new FLIDs into earlier days until
the store holds ``flights``, then analyses the tables: whatever in msgx reads more as the store
grows then shows in the soak's tenths. The copies are plain past days: no ledger, message or event
refers to them, as for days long archived.
"""

from __future__ import annotations

import time

import psycopg

_FLID_TABLES_SQL = ("SELECT table_name FROM information_schema.columns WHERE table_schema = 'public' "
                    "AND column_name = 'flid' AND table_name LIKE 'flight%%' ORDER BY table_name")
_COLUMNS_SQL = ("SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' "
                "AND table_name = %s AND is_generated = 'NEVER' AND coalesce(column_default, '') NOT LIKE 'nextval%%' "
                "ORDER BY ordinal_position")


def _copy_sql(table: str, columns: list[str], copies: int) -> str:
    """Copies 1..``copies`` of ``table``'s original rows: FLID (and MAID) renamed, FDAY that many days back."""
    def value(column: str) -> str:
        if column == "flid":
            return "'H' || g || '-' || f.flid"
        if column == "maid":
            return "CASE WHEN f.maid IS NULL THEN NULL ELSE 'H' || g || '-' || f.maid END"
        if column == "fday":
            return "f.fday - g"
        return f"f.{column}"
    return (f"INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(value(c) for c in columns)} "
            f"FROM {table} f, generate_series(1, {copies}) g WHERE f.flid NOT LIKE 'H%%'")


def store_history(dsn: str, flights: int) -> tuple[int, float]:
    """Copy the stored flights into earlier days until about ``flights`` are stored; returns the
    flights stored and the seconds it took."""
    t = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM flight_schd").fetchone()
        have = int(row[0]) if row else 0
        if have == 0 or have >= flights:
            return have, 0.0
        copies = max(1, (flights - have) // have)
        for (table,) in conn.execute(_FLID_TABLES_SQL).fetchall():
            columns = [c for (c,) in conn.execute(_COLUMNS_SQL, (table,)).fetchall()]
            conn.execute(_copy_sql(table, columns, copies).encode())
        conn.execute("ANALYZE")
        row = conn.execute("SELECT count(*) FROM flight_schd").fetchone()
        return int(row[0]) if row else 0, time.monotonic() - t
