"""The reads of the few open, pending and waiting rows use their partial indexes in every plan
PostgreSQL makes, the generic plan of a prepared statement included (P38); the health figure of
flights with unknown airbridges (US-14 AC3) reads its partial index, not every stored flight.

psycopg prepares a statement that has run five times on a connection; PostgreSQL may then plan it
once for all parameter values. Such a plan cannot use a partial index whose predicate names values
the statement binds, so a read meant for the open rows walked every finished one (0.2 s per late
scan at the end of a 300,000-message backlog). Here every statement is prepared at once and planned
generically, sequential scans disabled: a plan that does not name the partial index could not use it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from msgx_engine.db import make_engine
from msgx_engine.store import (
    backfill_todos,
    bridges,
    cutover_state,
    monitoring,
    overview,
    queue,
    queue_figures,
    registration,
)

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
# each read, and the partial index it is meant to read
READS = {
    "registration.low_water": (lambda c: registration.low_water(c, 0),
                               ("proc_state_open_idx", "backfill_todo_pending_idx")),
    "queue.heads": (lambda c: queue.heads(c, pid=-1, writer_row="writer", limit=64, start=19_991),
                    ("proc_state_open_idx",)),
    "queue_figures.open_count": (queue_figures.open_count, ("proc_state_open_idx",)),
    "queue_figures.head_summary": (queue_figures.head_summary, ("proc_state_open_idx",)),
    "registration.open_ids_after": (lambda c: registration.open_ids_after(c, 0, 10), ("proc_state_open_idx",)),
    "backfill_todos.claim_todos": (lambda c: backfill_todos.claim_todos(c, NOW, 10), ("backfill_todo_pending_idx",)),
    "backfill_todos.pending_todos": (backfill_todos.pending_todos, ("backfill_todo_pending_idx",)),
    "backfill_todos.due_todos": (lambda c: backfill_todos.due_todos(c, NOW), ("backfill_todo_pending_idx",)),
    "queue_figures.backfill_summary": (queue_figures.backfill_summary, ("backfill_todo_pending_idx",)),
    "cutover_state.position": (cutover_state.position, ("proc_state_open_idx",)),
    "cutover_state.pending_marks": (lambda c: cutover_state.pending_marks(c, 10**9), ("backfill_todo_pending_idx",)),
    "monitoring.waiting_dead_count": (monitoring.waiting_dead_count, ("proc_state_attention_idx",)),
    "monitoring.waiting_dead_ids": (lambda c: monitoring.waiting_dead_ids(c, 10), ("proc_state_attention_idx",)),
    "monitoring.waiting_unsupported_types": (lambda c: monitoring.waiting_unsupported_types(c, NOW - timedelta(1)),
                                             ("proc_state_attention_idx",)),
    "overview.waiting_dead_letters": (overview.waiting_dead_letters, ("proc_state_attention_idx",)),
    "bridges.mapping_status": (bridges.mapping_status, ("flight_schd_bridges_unknown_idx",)),
}
# a value of each parameter type, for EXPLAIN EXECUTE of a generic plan (the values do not matter)
_SAMPLE = {"bigint": "0", "integer": "0", "smallint": "0", "text": "'x'", "character varying": "'x'",
           "boolean": "false", "timestamp with time zone": "now()", "timestamp without time zone": "now()::timestamp"}


@pytest.fixture(scope="module")
def engine(pg_dbs):
    """A store of 20,000 finished messages (marks written) and a few open, pending and waiting."""
    engine = make_engine(pg_dbs.fresh())
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO proc_state (msg_id, status) SELECT g, CASE WHEN g > 19990 THEN 'PENDING' "
                          "WHEN g % 5000 = 0 THEN 'DEAD' ELSE 'SUCCEEDED' END FROM generate_series(1, 20000) g"))
        conn.execute(text("INSERT INTO backfill_todo (msg_id, status) SELECT g, CASE WHEN g > 19980 THEN 'PENDING' "
                          "ELSE 'DONE' END FROM generate_series(1, 20000) g"))
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("ANALYZE proc_state, backfill_todo"))
    yield engine
    engine.dispose()


def generic_plans(conn) -> list[str]:
    """The generic plan of every statement prepared on ``conn``."""
    plans = []
    for name, types in conn.exec_driver_sql("SELECT name, parameter_types::text[] FROM pg_prepared_statements "
                                            "WHERE NOT from_sql").all():
        args = ", ".join(_SAMPLE[t] for t in types)
        call = f"{name}({args})" if types else name
        plans.append("\n".join(r[0] for r in conn.exec_driver_sql(f"EXPLAIN EXECUTE {call}")))
    return plans


@pytest.mark.parametrize("read", READS)
def test_the_read_uses_its_partial_index_in_a_generic_plan_p38(engine, read):
    run, indexes = READS[read]
    with engine.connect() as conn:
        conn.connection.driver_connection.prepare_threshold = 0     # prepare every statement at once
        conn.exec_driver_sql("SET plan_cache_mode = force_generic_plan")
        conn.exec_driver_sql("SET enable_seqscan = off")
        conn.exec_driver_sql("DEALLOCATE ALL")
        run(conn)
        plans = generic_plans(conn)
        conn.rollback()
    assert plans, f"{read} prepared no statement"
    for index in indexes:
        assert any(index in plan for plan in plans), f"{read}: no generic plan reads {index}:\n" + "\n\n".join(plans)


def test_the_head_query_starts_at_the_pumps_floor_not_at_the_finished_messages_p40(pg_dbs):
    """P40, queue floor: a backlog's finished messages leave dead entries in the open messages'
    partial index until VACUUM runs (autovacuum off here, as on a server that has it off or
    behind). Read from the pump's floor, the head query touches a few pages; from the index's
    start it walks every finished entry. Both find the same heads."""
    engine = make_engine(pg_dbs.fresh())
    try:
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE proc_state SET (autovacuum_enabled = false)"))
            conn.execute(text("INSERT INTO proc_state (msg_id, status) "
                              "SELECT g, 'PENDING' FROM generate_series(1, 50000) g"))
        with engine.begin() as conn:       # the backlog drained but its last 10: each row left the index
            conn.execute(text("UPDATE proc_state SET status = 'SUCCEEDED' WHERE msg_id <= 49990"))
        buffers, found = {}, {}
        for start in (0, 49_991):
            with engine.begin() as conn:
                found[start] = [h.msg_id for h in queue.heads(conn, pid=-1, writer_row="writer", limit=64, start=start)]
                sql = queue._HEAD_SQL.replace("%(pid)s", "-1").replace("%(name)s", "'writer'").replace(
                    "%(limit)s", "64").replace("%(start)s", str(start))
                plan = "\n".join(r[0] for r in conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS) " + sql))
                top = re.search(r"Buffers: shared hit=(\d+)(?: read=(\d+))?", plan)     # the whole statement's
                assert top is not None, plan
                buffers[start] = int(top.group(1)) + int(top.group(2) or 0)
        assert found[0] == found[49_991] == list(range(49_991, 50_001))
        assert buffers[49_991] * 10 < buffers[0], buffers
    finally:
        engine.dispose()
