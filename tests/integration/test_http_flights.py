"""GET /all/flights: the current flights from PostgreSQL, filtered, ordered, in one consistent
read-only snapshot with a constant number of statements; an unavailable database is a 503, never
an empty list (US-12 AC1-AC3, D11, DESIGN §6 reads)."""

from __future__ import annotations

from datetime import date
from types import MappingProxyType

from sqlalchemy import event
from starlette.testclient import TestClient

from msgx_engine.db import make_engine
from msgx_engine.http.app import create_app
from msgx_engine.state.model import FlightState, freeze_entry
from msgx_engine.state.serialize import state_document
from msgx_engine.store.flights import FlightRepository
from tests.http_support import assert_refused, client_for


def flight(flid: str, *, version: int = 1, gates: tuple[str, ...] = ("A1",), deleted: bool = False,
           **scalars: str) -> FlightState:
    fields: dict = dict(scalars)
    if gates:
        fields["GTDT"] = tuple(freeze_entry({"GTNO": str(i), "GATE": g, "GTYP": "D"})
                               for i, g in enumerate(gates, start=1))
    return FlightState(flid=flid, fields=MappingProxyType(dict(sorted(fields.items()))), fday=date(2021, 1, 23),
                       state_version=version, last_message_id=version, deleted=deleted)


def persist(engine, *states: FlightState) -> None:
    with engine.begin() as conn:
        FlightRepository(conn).persist_next_states(list(states))


def test_empty_database_is_an_empty_array(app):
    """US-12 AC2 (空结果): no flights is a 200 with []."""
    resp = client_for(app).get("/all/flights")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("application/json")
    assert resp.json() == []


def test_current_flights_filtered_and_ordered_by_flid(app):
    """US-12 AC1/AC2, D11: deleted flights and code-share flights (MAID set) are left out; the rest
    are whole-state documents ordered by FLID in code-point order."""
    persist(app.engine,
            flight("16", FLNO="CA16"), flight("121112312", FLNO="MU5101", gates=("B1", "B2")),
            flight("15", FLNO="CA15", gates=()), flight("17", FLNO="CZ17", MAID="16"),
            flight("18", FLNO="HU18", deleted=True))
    resp = client_for(app).get("/all/flights")
    assert resp.status_code == 200
    docs = resp.json()
    assert [d["FLID"] for d in docs] == ["121112312", "15", "16"]
    with app.engine.connect() as conn:
        stored = FlightRepository(conn).load(["121112312", "15", "16"])
    assert docs == [state_document(stored[f]) for f in ("121112312", "15", "16")]
    assert docs[0]["GTDT"] == [{"GATE": "B1", "GTNO": "1", "GTYP": "D"}, {"GATE": "B2", "GTNO": "2", "GTYP": "D"}]
    assert "GTDT" not in docs[1]


def statements_and_modes(app, n_flights: int) -> tuple[int, set]:
    """Run GET /all/flights over n flights; count statements and record the transaction modes."""
    persist(app.engine, *[flight(f"F{i:05d}", gates=("A1", "A2")) for i in range(n_flights)])
    seen: list[str] = []
    modes: set = set()

    def on_execute(conn, cursor, statement, parameters, context, executemany):
        seen.append(statement)
        # Ask the server, in the same transaction, what mode it is really in (raw DBAPI: not counted).
        modes.add(cursor.connection.execute("SELECT current_setting('transaction_isolation'), "
                                            "current_setting('transaction_read_only')").fetchone())

    event.listen(app.engine, "after_cursor_execute", on_execute)
    try:
        resp = client_for(app).get("/all/flights")
    finally:
        event.remove(app.engine, "after_cursor_execute", on_execute)
    assert resp.status_code == 200 and len(resp.json()) == n_flights
    return len(seen), modes


def test_constant_number_of_statements_in_a_read_only_repeatable_read(app):
    """US-12, DESIGN §6 (constant number of queries), D11 (one consistent read): 1 and 60 flights
    take the same number of statements, all in a REPEATABLE READ, read-only transaction."""
    few, modes_few = statements_and_modes(app, 1)
    with app.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM flight_gate; DELETE FROM flight_schd")
    many, modes_many = statements_and_modes(app, 60)
    assert few == many
    assert modes_few == modes_many == {("repeatable read", "on")}


def test_one_snapshot_even_when_a_writer_commits_midway(app, settings):
    """D11 (一致性时点, US-12 AC2): a commit that lands between the read's statements is not seen;
    the response is the state as of the first statement, and the next GET shows the new state."""
    persist(app.engine, flight("100", version=1, gates=("A1",)))
    writer = make_engine(settings.db_url or "")
    fired: list[bool] = []

    def commit_change_after_first_statement(conn, cursor, statement, parameters, context, executemany):
        if not fired:
            fired.append(True)
            persist(writer, flight("100", version=2, gates=("Z9", "Z8")), flight("101", version=1))

    event.listen(app.engine, "after_cursor_execute", commit_change_after_first_statement)
    try:
        first = client_for(app).get("/all/flights").json()
    finally:
        event.remove(app.engine, "after_cursor_execute", commit_change_after_first_statement)
        writer.dispose()
    assert fired
    assert [(d["FLID"], d["STATE_VERSION"], [g["GATE"] for g in d["GTDT"]]) for d in first] == [("100", 1, ["A1"])]
    second = client_for(app).get("/all/flights").json()
    assert [(d["FLID"], d["STATE_VERSION"]) for d in second] == [("100", 2), ("101", 1)]


def test_unreachable_database_is_503_not_an_empty_list(app):
    """US-12 AC3: a dependency failure is never disguised as an empty array."""
    dead = make_engine("postgresql+psycopg://postgres@127.0.0.1:1/nowhere")
    try:
        resp = TestClient(create_app(mailbox=app.mailbox, engine=dead)).get("/all/flights")
    finally:
        dead.dispose()
    assert_refused(resp, 503, "db_unavailable")


def test_unmigrated_database_is_503(app, pg_dbs):
    """US-12 AC3, US-03 AC8: a database without the flight tables is unavailable, not empty."""
    bare = make_engine(pg_dbs.fresh(migrated=False))
    try:
        resp = TestClient(create_app(mailbox=app.mailbox, engine=bare)).get("/all/flights")
    finally:
        bare.dispose()
    assert_refused(resp, 503, "db_unavailable")
