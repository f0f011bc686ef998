"""Schema: Alembic migrations create exactly the tables of msgx_engine.store.tables (DESIGN §4, FS §3.2,
§6.1) and downgrade cleanly."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from msgx_engine.db import make_engine
from msgx_engine.store import migrate
from msgx_engine.store.tables import metadata


def test_upgrade_matches_the_table_module_and_downgrade_removes_everything(pg_dbs):
    engine = make_engine(pg_dbs.fresh(migrated=False))
    try:
        assert migrate.current_revision(engine) is None
        migrate.upgrade(engine)
        assert migrate.is_current(engine)
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata)
        assert diff == []
        names = set(inspect(engine).get_table_names())
        for table in ("flight_schd", "flight_gate", "flight_checkin", "flight_belt", "flight_stand_plan",
                      "flight_chute", "flight_delay", "flight_bridge_op", "flight_chock_op",
                      "flight_route_point", "schd_gen", "schd_gen_flid", "pipeline_lock", "proc_state",
                      "proc_state_hst", "msg_event", "backfill_todo", "req_track", "ref_master", "msg_identity"):
            assert table in names
        pk = inspect(engine).get_pk_constraint("flight_route_point")["constrained_columns"]
        assert pk == ["flid", "route_kind", "ordinal"]
        assert inspect(engine).get_foreign_keys("flight_gate") == []
        # D26: the identity binds through msg_identity's fixed-size hash key, not a unique text column
        assert inspect(engine).get_unique_constraints("proc_state") == []
        assert inspect(engine).get_pk_constraint("msg_identity")["constrained_columns"] == ["identity_hash"]
        migrate.downgrade(engine)
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
        migrate.upgrade(engine)
        assert migrate.is_current(engine)
    finally:
        engine.dispose()


def test_0004_moves_port_values_and_back(pg_dbs):
    """PORT open/close side by side: 0004 turns the old single pair into a one-entry port_text and
    its downgrade restores the pair (data kept both ways)."""
    import json

    from sqlalchemy import text

    engine = make_engine(pg_dbs.fresh(migrated=False))
    try:
        migrate.upgrade(engine, "0003")
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO flight_schd (flid, port_poid, port_potm) VALUES ('F1', 'O', '10AUG181855')"))
        migrate.upgrade(engine, "0004")
        with engine.connect() as conn:
            port = conn.execute(text("SELECT port_text FROM flight_schd WHERE flid = 'F1'")).scalar_one()
        assert json.loads(port) == [{"POID": "O", "POTM": "10AUG181855"}]
        migrate.downgrade(engine, "0003")
        with engine.connect() as conn:
            row = conn.execute(text("SELECT port_poid, port_potm FROM flight_schd WHERE flid = 'F1'")).one()
        assert tuple(row) == ("O", "10AUG181855")
    finally:
        engine.dispose()


def test_0007_derives_the_airbridges_of_existing_flights(pg_dbs):
    """D27, US-14: 0007 marks categories already in ref_master as loaded and fills
    flight_schd.stand_bridges from the ABDG rows (codes in code-point order, [] for remote stands);
    without ABDG rows nothing is derived (NULL = unknown)."""
    import json

    from sqlalchemy import text

    engine = make_engine(pg_dbs.fresh(migrated=False))
    try:
        migrate.upgrade(engine, "0006")
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO ref_master (rtype, rkey, fields) VALUES "
                              "('ABDG', 'b2', '{\"ABCD\":\"b2\",\"STND\":[\"111\",\"112\"]}'), "
                              "('ABDG', 'B1', '{\"ABCD\":\"B1\",\"STND\":[\"111\"]}'), "
                              "('GLST', 'G1', '{\"GCOD\":\"G1\"}')"))
            conn.execute(text("INSERT INTO flight_schd (flid, stnd) VALUES ('F1', '112'), ('F2', NULL), ('F3', 'R9')"))
            conn.execute(text("INSERT INTO flight_stand_plan (flid, ordinal, record_version, psst) "
                              "VALUES ('F1', 1, 1, '111')"))
        migrate.upgrade(engine, "0007")
        with engine.connect() as conn:
            loaded = sorted(r[0] for r in conn.execute(text("SELECT rtype FROM ref_load")))
            rows = dict(conn.execute(text("SELECT flid, stand_bridges FROM flight_schd")).fetchall())
        assert loaded == ["ABDG", "GLST"]
        assert json.loads(rows["F1"]) == {"111": ["B1", "b2"], "112": ["b2"]}
        assert json.loads(rows["F3"]) == {"R9": []} and rows["F2"] is None
    finally:
        engine.dispose()


def test_0009_copies_the_bindings_under_their_hash(pg_dbs):
    """D26: 0009 moves each bound identity into msg_identity, keyed by the SHA-256 of its text (the
    same key msgx_engine.store.identity computes), and drops the unique constraint; the downgrade
    restores it."""
    from sqlalchemy import text

    from msgx_engine.store.identity import identity_hash

    engine = make_engine(pg_dbs.fresh(migrated=False))
    try:
        migrate.upgrade(engine, "0008")
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO proc_state (msg_id, status, identity_key, payload_hash) VALUES "
                              "(7, 'SUCCEEDED', 'AODB|FLOP|GTDT|1243', 'h7'), (8, 'PENDING', NULL, NULL)"))
        migrate.upgrade(engine, "0009")
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT identity_hash, identity, msg_id, payload_hash FROM msg_identity")).all()
        assert [tuple(r) for r in rows] == [(identity_hash("AODB|FLOP|GTDT|1243"), "AODB|FLOP|GTDT|1243", 7, "h7")]
        migrate.downgrade(engine, "0008")
        uniques = {tuple(u["column_names"]) for u in inspect(engine).get_unique_constraints("proc_state")}
        assert ("identity_key",) in uniques and "msg_identity" not in inspect(engine).get_table_names()
    finally:
        engine.dispose()
