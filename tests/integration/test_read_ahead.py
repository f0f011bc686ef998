"""Read-ahead in a group (docs/decisions.md P11), groups of two-transaction messages
(P12) and the group's write-behind (P13): a group reads its next heads and the states of their
flights once per transaction and writes its states and statuses once, a group of messages with a
post-commit step commits their transaction 1 together, and what each leaves behind is exactly
what one message at a time leaves (INV-3 order, INV-8 terminal once, INV-9 duplicates, INV-20b
applied once, FS §5.4 whole states, C-25 cascade, INV-29 ADFT restore, snapshot generations), on
PostgreSQL and MariaDB."""

from __future__ import annotations

import uuid

from builders import flop, gtdt
from snapshot_builders import day_package, fltr, schd, sodt
from sqlalchemy import event, text

from msgx_engine.app import App
from msgx_engine.config import Settings
from msgx_engine.delivery.projection import Projection, connect
from msgx_engine.pipeline.grouping.lookahead import Lookahead
from msgx_engine.pipeline.pump import PumpOptions
from msgx_engine.store.tables import detail_tables
from tests.pipeline_support import gates

_TIMES = ("event_id", "created_at", "updated_at", "deleted_at", "released_at", "sent_at", "terminal_at", "at")


def _drain(app: App, **options) -> None:
    app.pump(PumpOptions(exit_when_waiting=True, idle_poll_s=0.01, **options)).run()


def _rows(app: App, table: str, order: str) -> list[dict]:
    with app.engine.connect() as conn:
        rows = conn.execute(text(f"SELECT * FROM {table} ORDER BY {order}")).mappings()
        return [{k: v for k, v in r.items() if k not in _TIMES} for r in rows]


def _everything(app: App) -> dict[str, list[dict]]:
    """Every flight row, detail row, outbox event (in order; ids differ where a group was rolled
    back) and queue outcome, without wall times."""
    tables = {"flight_schd": "flid", "msg_event": "event_id", "schd_gen": "fday", "schd_gen_flid": "fday, flid",
              "proc_state": "msg_id"}
    tables.update({name: "flid, ordinal" for name in detail_tables})
    return {t: _rows(app, t, order) for t, order in tables.items()}


def _adft(flid: str, extra: str = "") -> str:
    return schd("ADFT", fltr(flid, sodt(9), stnd="ADHOC", extra=extra))


def _mixed_day() -> list[str]:
    """Messages that read the same flights again and again, with writes of every kind between
    them: increments, a duplicate and an identity conflict inside one group, details that move
    and come back, code-share children created before and after their master and moved to
    another (D30: a master's MAFL reads children the group has not written yet), a snapshot
    (plans), a re-snapshot deleting a flight, an FDEL, an ADFT restoring a deleted flight, a new
    flight, an unsupported message (a group rolled back). RA5's messages would fail nowhere if a
    state read ahead were used after a write: they would only lose a field."""
    return [
        gtdt("RA1", (1, "A1")), gtdt("RA2", (1, "B1")),
        gtdt("RA6", (1, "F1"), seqn=990001), gtdt("RA6", (1, "F1"), seqn=990001), gtdt("RA6", (1, "F2"), seqn=990001),
        gtdt("RA6", (1, "F3"), (2, "F4")), gtdt("RA6", (1, "F5")), gtdt("RA6", (1, "F3"), (2, "F4")),
        flop("REMC", "RA5", "<REMC>first</REMC>"), gtdt("RA5", (1, "E1")), flop("REMC", "RA5", "<REMC>again</REMC>"),
        day_package(["RA1", "RA2", "RA3"], 9),
        gtdt("RA1", (1, "A2"), (2, "A3")), gtdt("RA3", (1, "C1")), gtdt("RA1", (1, "A4")),
        flop("FDEL", "RA2", "<FDEL/>"), gtdt("RA2", (1, "B2")),
        day_package(["RA1", "RA3"], 9),
        gtdt("RA3", (1, "C2")), _adft("RA2"), gtdt("RA2", (1, "B3")),
        gtdt("RA4", (1, "D1")), gtdt("RA4", (1, "D2")),
        _adft("RC1", "<MAID>RM1</MAID>"), _adft("RM1"), gtdt("RC2", (1, "G1")), _adft("RC2", "<MAID>RM1</MAID>"),
        gtdt("RM1", (1, "H1")), _adft("RC1", "<MAID>RM2</MAID>"), _adft("RM2"),
        flop("QQQQ", "RA1", "<QQQQ/>"),
        gtdt("RA1", (1, "A5")), gtdt("RA3", (1, "C3")), gtdt("RA4", (1, "D3")),
    ]


def _assert_same(grouped: dict[str, list[dict]], alone: dict[str, list[dict]]) -> None:
    for table in grouped:
        for a, b in zip(grouped[table], alone[table], strict=True):
            assert a == b, (table, {k: (a[k], b[k]) for k in a if a[k] != b[k]})


def _new_app(pg_dbs, mysql_dbs, clock, home, **settings) -> App:
    return App.from_settings(Settings(db_url=pg_dbs.fresh(), mailbox_url=mysql_dbs.fresh(), kafka_bootstrap=None,
                                      redis_url=None, home=home, gap_grace_s=5.0, **settings), clock=clock)


def _projected(app: App, redis_url: str) -> Projection:
    """The app's post-commit step: a projection on the shared Redis under a key of its own."""
    projection = Projection(connect(redis_url), key=f"flightInfo_test_{uuid.uuid4().hex[:8]}")
    app.post_commit.append(projection.hook)
    return projection


def _sixteen_on_stored_flights(app: App, prefix: str) -> tuple[list[str], list[int]]:
    """16 stored flights, then 16 GTDT messages (one each, a new gate) put in the mailbox, not
    yet processed: their bodies and mailbox ids."""
    for i in range(16):
        app.mailbox.put(gtdt(f"{prefix}{i:02d}", (1, "X0")))
    _drain(app)
    bodies = [gtdt(f"{prefix}{i:02d}", (1, f"Y{i}")) for i in range(16)]
    return bodies, [app.mailbox.put(b) for b in bodies]


def _assert_sixteen_done(app: App, prefix: str, bodies: list[str], ids: list[int]) -> None:
    """Each of the 16 SUCCEEDED once in id order, applied, its events released, its gate stored;
    the same body again afterwards is SKIPPED(duplicate) of it (INV-9)."""
    with app.engine.connect() as conn:
        done = conn.execute(text("SELECT msg_id FROM proc_state_hst WHERE status = 'SUCCEEDED' AND msg_id >= :m "
                                 "ORDER BY id"), {"m": ids[0]}).scalars().all()
        unreleased = conn.execute(text("SELECT count(*) FROM msg_event WHERE released_at IS NULL")).scalar_one()
        applied = conn.execute(text("SELECT count(*) FROM proc_state WHERE msg_id >= :m "
                                    "AND applied_at IS NOT NULL"), {"m": ids[0]}).scalar_one()
    assert done == ids and unreleased == 0 and applied == 16
    assert all(gates(app, f"{prefix}{i:02d}") == [(1, f"Y{i}")] for i in range(16))
    dup = app.mailbox.put(bodies[3])
    _drain(app)
    with app.engine.connect() as conn:
        assert conn.execute(text("SELECT status, reason, dup_of FROM proc_state WHERE msg_id = :m"),
                            {"m": dup}).one() == ("SKIPPED", "duplicate", ids[3])


def _grouped_and_alone(pg_dbs, mysql_dbs, clock, tmp_path, redis_url: str | None = None,
                       **settings) -> tuple[App, dict, dict]:
    """The mixed day drained by the pump with groups and read-ahead, and by a pump with one
    commit per message (``group_messages=1``), each on its own databases; with ``redis_url``
    each projects to Redis (its own key), and the projections are compared too."""
    app = _new_app(pg_dbs, mysql_dbs, clock, tmp_path / "grouped", **settings)
    solo = _new_app(pg_dbs, mysql_dbs, clock, tmp_path / "solo", **settings)
    projections = [_projected(app, redis_url), _projected(solo, redis_url)] if redis_url else []
    try:
        for xml in _mixed_day():
            app.mailbox.put(xml)
            solo.mailbox.put(xml)
        _drain(app)
        _drain(solo, group_messages=1)
        grouped, alone = _everything(app), _everything(solo)
        if projections:
            hashes = [(p.client.hgetall(p.key), p.client.hgetall(p.version_key)) for p in projections]
            grouped["redis"], alone["redis"] = [hashes[0][0], hashes[0][1]], [hashes[1][0], hashes[1][1]]
            assert len(hashes[0][0]) >= 8, hashes[0][0].keys()
        return app, grouped, alone
    finally:
        for p in projections:
            p.client.delete(p.key, p.version_key)
            p.client.close()
        solo.dispose()


def test_p11_read_ahead_leaves_what_one_message_at_a_time_leaves(pg_dbs, mysql_dbs, clock, tmp_path):
    """The same mailbox processed with groups and read-ahead (the pump's default) and one commit
    per message without read-ahead (``group_messages=1``) ends in identical flights, details,
    events, snapshot generations and queue outcomes."""
    app, grouped, alone = _grouped_and_alone(pg_dbs, mysql_dbs, clock, tmp_path)
    app.dispose()
    assert [r["status"] for r in grouped["proc_state"]].count("SUCCEEDED") >= 16
    _assert_same(grouped, alone)
    final = {(r["flid"], r["ordinal"]): (r["gate"], r["record_version"]) for r in grouped["flight_gate"]}
    assert final[("RA1", 1)][0] == "A5" and final[("RA5", 1)] == ("E1", 2)
    assert (final[("RA6", 1)], final[("RA6", 2)]) == (("F3", 4), ("F4", 4))
    mafl = {r["flid"]: r["mafl_text"] or "" for r in grouped["flight_schd"] if r["flid"] in ("RM1", "RM2")}
    assert "RC2" in mafl["RM1"] and "RC1" not in mafl["RM1"] and "RC1" in mafl["RM2"], mafl


def test_p12_two_transaction_groups_leave_what_one_message_at_a_time_leaves(pg_dbs, mysql_dbs, clock, tmp_path):
    """With transaction 1 and 2 split (as with a post-commit step), a group commits its messages'
    transaction 1 together, then their post-commit steps and terminal statuses: the end state is
    the one-message-at-a-time state, and every message is terminal, applied once (INV-20b)."""
    app, grouped, alone = _grouped_and_alone(pg_dbs, mysql_dbs, clock, tmp_path, split_transactions=True)
    try:
        with app.engine.connect() as conn:
            open_or_unapplied = conn.execute(text(
                "SELECT count(*) FROM proc_state WHERE status NOT IN ('SUCCEEDED', 'SKIPPED', 'DEAD') "
                "OR (status = 'SUCCEEDED' AND applied_at IS NULL)")).scalar_one()
    finally:
        app.dispose()
    assert open_or_unapplied == 0
    _assert_same(grouped, alone)


def test_p16_projected_groups_leave_what_one_message_at_a_time_leaves(pg_dbs, mysql_dbs, clock, tmp_path,
                                                                      redis_url):
    """With the Redis projection as the post-commit step (INV-23), a group holds its writes and
    its applied marks back and projects once per group (P16): flights, details, events,
    generations, queue outcomes and the projection with its version hash are those of one
    message at a time, and every message is terminal, applied once (INV-20b)."""
    app, grouped, alone = _grouped_and_alone(pg_dbs, mysql_dbs, clock, tmp_path, redis_url)
    app.dispose()
    assert all(r["status"] in ("SUCCEEDED", "SKIPPED", "DEAD") for r in grouped["proc_state"])
    _assert_same(grouped, alone)


def test_p16_a_projected_group_writes_and_projects_once(app, redis_url):
    """16 GTDT messages on 16 stored flights with the projection, in one group: one flight upsert,
    one statement for the 16 applied marks and identity bindings (none for one message), one
    terminal statement and one projection write for all of them; each SUCCEEDED once in id order,
    released, with its gate, projected at its version (INV-23); a duplicate after the group is
    still SKIPPED(duplicate) (INV-9)."""
    projection = _projected(app, redis_url)
    try:
        bodies, ids = _sixteen_on_stored_flights(app, "RP")
        writes: list[int] = []
        apply = projection.apply
        projection.apply = lambda states: writes.append(len(list(states))) or apply(states)  # type: ignore[method-assign]
        seen: dict[str, int] = {"upsert": 0, "mark one": 0, "mark group": 0, "finish": 0, "single status": 0}

        def count(conn, cursor, statement, *rest) -> None:
            if statement.startswith("INSERT INTO flight_schd"):
                seen["upsert"] += 1
            elif "UPDATE proc_state SET applied_at" in statement:
                seen["mark one"] += 1
            elif statement.startswith("WITH v AS") and "applied_at IS NULL" in statement:
                seen["mark group"] += 1
            elif "applied_at IS NOT NULL" in statement and "UPDATE proc_state p" in statement:
                seen["finish"] += 1
            elif "v_terminal_at" in statement:
                seen["single status"] += 1

        event.listen(app.engine, "before_cursor_execute", count)
        _drain(app, group_s=60.0)
        event.remove(app.engine, "before_cursor_execute", count)
        assert seen == {"upsert": 1, "mark one": 0, "mark group": 1, "finish": 1, "single status": 0}, seen
        assert writes == [16], writes
        versions = projection.client.hgetall(projection.version_key)
        assert {f"RP{i:02d}": "2" for i in range(16)} == versions
        assert all(f'"Y{i}"' in (projection.get(f"RP{i:02d}") or "") for i in range(16))
        _assert_sixteen_done(app, "RP", bodies, ids)
    finally:
        projection.client.delete(projection.key, projection.version_key)


def test_p12_a_group_of_two_transaction_messages_commits_together(pg_dbs, mysql_dbs, clock, tmp_path):
    """40 GTDT messages with split transactions, drained in one group: far fewer commits than the
    two per message they would take alone (fewer than one each), each SUCCEEDED once in id order with its gate."""
    app = _new_app(pg_dbs, mysql_dbs, clock, tmp_path / "split", split_transactions=True)
    try:
        ids = [app.mailbox.put(gtdt(f"RS{i % 3}", (1, f"Z{i}"))) for i in range(40)]
        commits: list[int] = []
        event.listen(app.engine, "commit", lambda conn: commits.append(1))
        _drain(app, group_s=60.0)
        with app.engine.connect() as conn:
            done = conn.execute(text("SELECT msg_id FROM proc_state_hst WHERE status = 'SUCCEEDED' ORDER BY id")
                                ).scalars().all()
        assert done == ids
        assert len(commits) < 40, f"{len(commits)} commits for 40 split messages (alone: 2 each)"
        assert [gates(app, f"RS{i}") for i in range(3)] == [[(1, "Z39")], [(1, "Z37")], [(1, "Z38")]]
    finally:
        app.dispose()


def test_p11_a_group_reads_its_heads_and_its_flights_once(app):
    """16 GTDT messages on 16 stored flights, in one group: one head query and one flight load
    for all of them (not one each); each SUCCEEDED once in id order with its gate."""
    bodies, ids = _sixteen_on_stored_flights(app, "RH")
    heads: list[str] = []
    loads: list[str] = []

    def count(conn, cursor, statement, *rest) -> None:
        if "FROM pipeline_lock WHERE name" in statement and "FROM proc_state p" in statement:
            heads.append(statement)
        if statement.startswith("WITH m AS (SELECT f.flid"):
            loads.append(statement)

    event.listen(app.engine, "before_cursor_execute", count)
    _drain(app, group_s=60.0)
    assert len(heads) <= 3, f"{len(heads)} head queries for 16 grouped messages"     # + the final idle look
    assert len(loads) == 1, f"{len(loads)} flight loads for 16 grouped messages"
    _assert_sixteen_done(app, "RH", bodies, ids)


def test_p11_what_was_read_ahead_is_dropped_with_its_transaction(app):
    """Heads and states read ahead are only used inside the transaction that read them: after a
    commit (made anywhere) they are gone, so nothing stale is ever used."""
    ahead = Lookahead(4)
    with app.engine.connect() as conn:
        conn.execute(text("SELECT 1"))
        ahead.keep_heads(conn, [])
        ahead.flights["X"] = None
        assert ahead.valid(conn)
        conn.commit()
        conn.execute(text("SELECT 1"))
        assert not ahead.valid(conn)
        assert ahead.flights == {} and ahead.take_head(conn) is None


def test_p13_a_group_writes_its_states_and_statuses_once(app):
    """16 GTDT messages on 16 stored flights, in one group: one flight upsert and one status
    statement for all of them (not one each); each SUCCEEDED once in id order, released, with
    its gate; a duplicate after the group is still SKIPPED(duplicate) (INV-9)."""
    bodies, ids = _sixteen_on_stored_flights(app, "RW")
    upserts: list[str] = []
    statuses: list[str] = []

    def count(conn, cursor, statement, *rest) -> None:
        if statement.startswith("INSERT INTO flight_schd"):
            upserts.append(statement)
        if "UPDATE proc_state" in statement and "SUCCEEDED" in statement or "v_terminal_at" in statement:
            statuses.append(statement)

    event.listen(app.engine, "before_cursor_execute", count)
    _drain(app, group_s=60.0)
    assert (len(upserts), len(statuses)) == (1, 1), (len(upserts), len(statuses))
    _assert_sixteen_done(app, "RW", bodies, ids)


def test_p13_a_master_sees_the_children_its_group_holds(app):
    """D30, INV-21: a child created in a group, then its master: the master's derived MAFL (its
    stored row and the event of the message that created it) names the child, whose write is
    still held back when the master reads its children."""
    app.mailbox.put(gtdt("RX0", (1, "X0")))
    _drain(app)
    app.mailbox.put(_adft("RK1", "<MAID>RN1</MAID>"))
    master = app.mailbox.put(_adft("RN1"))
    _drain(app, group_s=60.0)
    with app.engine.connect() as conn:
        stored = conn.execute(text("SELECT mafl_text FROM flight_schd WHERE flid = 'RN1'")).scalar_one()
        payloads = conn.execute(text("SELECT payload FROM msg_event WHERE msg_id = :m AND flid = 'RN1'"),
                                {"m": master}).scalars().all()
    assert "RK1" in (stored or "")
    assert payloads and all("RK1" in p for p in payloads), payloads
