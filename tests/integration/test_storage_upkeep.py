"""The tables every message rewrites keep room for HOT updates and are vacuumed early (migration 0016).

A HOT update puts the new row version on the same page and adds no index entry, and the page
reclaims its dead versions by itself the next time it is read, with no VACUUM: on a server whose
autovacuum is off (this project's machines) it is the only kind of rewrite whose space comes back.
It needs room on the page, which a table filled to 100 % does not have.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
from sqlalchemy import text

from msgx_engine.db import make_engine
from msgx_engine.store import queue, registration

# what 0016 sets on the tables every message rewrites (a few of them; the migration lists all)
EXPECTED = {
    "proc_state": {"fillfactor": "40", "autovacuum_vacuum_threshold": "1000"},
    "msg_event": {"fillfactor": "60", "autovacuum_vacuum_scale_factor": "0.02"},
    "flight_schd": {"fillfactor": "70"},
    "backfill_todo": {"autovacuum_vacuum_threshold": "1000"},
    "flight_gate": {"autovacuum_vacuum_scale_factor": "0.02"},
    "metric_total": {"fillfactor": "50", "autovacuum_vacuum_threshold": "200"},
}


def _options(url: str) -> dict[str, dict[str, str]]:
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        rows = conn.execute("SELECT relname, reloptions FROM pg_class WHERE reloptions IS NOT NULL").fetchall()
    return {name: dict(o.split("=", 1) for o in options) for name, options in rows}


def test_the_rewritten_tables_keep_room_and_early_vacuum(pg_url):
    options = _options(pg_url)
    for table, wanted in EXPECTED.items():
        assert wanted.items() <= options.get(table, {}).items(), (table, options.get(table))


def _applied_hot_share(url: str, messages: int = 640) -> float:
    """Register ``messages`` as intake does, then write transaction 1's applied columns in groups
    of 64 as the pump does (``queue.mark_applied_many``): the share of those updates that were HOT."""
    engine = make_engine(url)
    now = datetime.now(UTC)
    ids = list(range(1, messages + 1))
    try:
        with engine.begin() as conn:
            registration.register(conn, ids, 0, now, [])
        with engine.begin() as conn:
            pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
            for start in range(0, messages, 64):
                rows = [queue.Applied(i, now, "FLOP", "GTDT", f"h{i}", f"AODB|FLOP|GTDT|{i}")
                        for i in ids[start:start + 64]]
                assert queue.mark_applied_many(conn, rows, now=now, pid=pid, window=timedelta(hours=24))
            upd, hot = conn.execute(text("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables "
                                         "WHERE relname = 'proc_state'")).one()
        assert upd == messages
        return hot / upd
    finally:
        engine.dispose()


def test_transaction_1s_write_of_a_message_stays_on_its_page(pg_dbs):
    """The applied columns change no indexed column, so with the fill factor's room every one of
    those updates is HOT; the same statements on a table filled to 100 % mostly are not."""
    with_room = _applied_hot_share(pg_dbs.fresh())
    full = pg_dbs.fresh()
    with psycopg.connect(full.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        conn.execute("ALTER TABLE proc_state RESET (fillfactor)")
    without = _applied_hot_share(full)
    assert with_room >= 0.95, with_room
    assert without < 0.5, without
