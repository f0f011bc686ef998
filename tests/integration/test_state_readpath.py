"""Read path (FS §9 gap closed): a batch of flights with all details loads in a constant number of
SQL statements, and what is read equals what was written (one writer path, FS §5.4)."""

from __future__ import annotations

from types import MappingProxyType

import pytest
from sqlalchemy import event
from sqlalchemy.exc import IntegrityError

from msgx_engine.state.model import FlightState, freeze_entry
from msgx_engine.store.bulk import TextArray
from msgx_engine.store.flights import FlightRepository, _load_sql


def flight(n: int) -> FlightState:
    gates = tuple(freeze_entry({"GTNO": str(g), "GATE": f"G{n}-{g}"}) for g in (1, 2))
    fields = {"STND": f"S{n}", "GTDT": gates, "DELY": (freeze_entry({"CODE": "93", "TEXT": "late"}),),
              "ROUT": (freeze_entry({"RTNO": "1", "APCD": "PEK"}),),
              "ERUT": (freeze_entry({"RTNO": "1", "APCD": "SHA"}), freeze_entry({"RTNO": "2", "APCD": "CTU"})),
              "FDIV": freeze_entry({"DDES": "HKG", "DDIR": "TO", "TEXT": "WX"}),
              "SRVT": (freeze_entry({"SRTC": "ATN", "SRQT": "2"}),)}
    if n % 10 == 1:
        fields["MAID"] = "F000000"
    return FlightState(flid=f"F{n:06d}", fields=MappingProxyType(dict(sorted(fields.items()))), state_version=1)


class StatementCounter:
    def __init__(self, engine) -> None:
        self.count = 0
        event.listen(engine, "before_cursor_execute", self._hit)

    def _hit(self, *args) -> None:
        self.count += 1


def test_loading_1000_flights_issues_a_constant_number_of_statements(app):
    """FS §9: 1,000 flights cost the same statements as 10 (one: the main rows and all 9 detail
    tables in one UNION ALL), inside one transaction; the live code-share children of
    any number of masters (D30) cost one statement whatever the family size."""
    written = [flight(n) for n in range(1000)]
    with app.engine.begin() as conn:
        FlightRepository(conn).persist_next_states(written)
    counter = StatementCounter(app.engine)
    counts = {}
    for size in (10, 1000):
        with app.engine.begin() as conn:
            before = counter.count
            states = FlightRepository(conn).load([s.flid for s in written[:size]])
            counts[size] = counter.count - before
        assert len(states) == size
    assert counts[10] == counts[1000] == 1
    assert {s.flid: s.fields for s in written} == {f: s.fields for f, s in states.items()}
    with app.engine.begin() as conn:
        before = counter.count
        children = FlightRepository(conn).codeshare_children(["F000000", "F000001"])
        relatives = counter.count - before
    assert relatives == 1 and len(children["F000000"]) == 100 and children["F000001"] == ()


class StatementLog:
    def __init__(self, engine) -> None:
        self.statements: list[str] = []
        event.listen(engine, "before_cursor_execute", self._hit)

    def _hit(self, conn, cursor, statement, *args) -> None:
        self.statements.append(statement)

    def deletes(self) -> list[str]:
        return [s for s in self.statements if "DELETE FROM flight_" in s]


def test_new_flights_are_written_without_a_detail_delete_and_read_back_equal(app):
    """FS §5.4, decision C2: flights the caller names as having no stored row (``unstored``) get no
    DELETE to the 9 detail tables. 600 of them go the COPY way (the main rows as value
    lists, ``main_values``), 3 the JSON way, and both read back equal to what was written; their
    next states (version 2, one gate fewer) replace the detail rows, which takes the DELETE."""
    big = [flight(n) for n in range(600)]
    small = [flight(n) for n in range(1000, 1003)]
    log = StatementLog(app.engine)
    for batch in (big, small):
        with app.engine.begin() as conn:
            FlightRepository(conn).persist_next_states(batch, unstored={s.flid for s in batch})
    assert log.deletes() == []
    with app.engine.connect() as conn:
        loaded = FlightRepository(conn).load(s.flid for s in big + small)
    assert {f: (s.fields, s.state_version) for f, s in loaded.items()} == {
        s.flid: (s.fields, 1) for s in big + small}

    fewer = [FlightState(flid=s.flid, fields=MappingProxyType({**s.fields, "GTDT": s.fields["GTDT"][:1]}),
                         state_version=2) for s in big]
    with app.engine.begin() as conn:
        FlightRepository(conn).persist_next_states(fewer)
    assert len(log.deletes()) == 1
    with app.engine.connect() as conn:
        loaded = FlightRepository(conn).load(s.flid for s in fewer)
    assert {f: s.fields["GTDT"] for f, s in loaded.items()} == {s.flid: s.fields["GTDT"] for s in fewer}
    assert all(s.state_version == 2 for s in loaded.values())


def test_first_states_are_copied_in_and_never_overwrite_a_stored_row(app):
    """Decisions P24, C2, FS §5.4: a batch of flights named as having no stored row goes by COPY
    straight into ``flight_schd``, not by an upsert. Were one of them stored after all, the batch
    fails on the key and writes nothing: it never overwrites a stored flight in silence. The same
    batch not so named is upserted, whatever its versions."""
    kept = FlightState(flid=flight(7).flid, fields=MappingProxyType({"STND": "KEPT"}), state_version=1)
    with app.engine.begin() as conn:
        FlightRepository(conn).persist_next_states([kept])         # one row: the JSON upsert
    with pytest.raises(IntegrityError), app.engine.begin() as conn:
        FlightRepository(conn).persist_next_states([flight(n) for n in range(600)],
                                                   unstored={flight(n).flid for n in range(600)})
    with app.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM flight_schd").scalar_one() == 1
        assert FlightRepository(conn).load([kept.flid])[kept.flid].fields == kept.fields
    with app.engine.begin() as conn:
        FlightRepository(conn).persist_next_states([flight(n) for n in range(600)])
    with app.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM flight_schd").scalar_one() == 600
        assert FlightRepository(conn).load([kept.flid])[kept.flid].fields == flight(7).fields


def test_a_groups_read_goes_through_each_detail_tables_key_whatever_its_statistics(app):
    """P39: a group's read of 64 flights reaches their detail rows by each table's key, also when
    the table was never analysed and holds a hundred dead versions of every flight's rows (a
    backlog of changes to a few thousand flights, autovacuum off or behind): the planner, guessing
    from the table's pages, would otherwise read the whole table into a hash join on every group,
    and the read would grow with every change the backlog made. What is read stays what was written."""
    flights = [flight(n) for n in range(300)]
    with app.engine.begin() as conn:
        FlightRepository(conn).persist_next_states(flights)
    for round_ in range(100):                      # every flight's gates rewritten a hundred times
        moved = [FlightState(flid=s.flid, fields=MappingProxyType({**s.fields, "GTDT": (
                     freeze_entry({"GTNO": "1", "GATE": f"G{round_}"}),)}), state_version=2 + round_)
                 for s in flights]
        with app.engine.begin() as conn:
            FlightRepository(conn).persist_next_states(moved, previous={s.flid: s for s in flights})
        flights = moved
    wanted = [s.flid for s in flights[:64]]
    with app.engine.begin() as conn:
        plan = "\n".join(r[0] for r in conn.exec_driver_sql(
            "EXPLAIN " + _load_sql(for_update=True, by_key=True), {"flids": TextArray(wanted)}))
        states = FlightRepository(conn).load(wanted, for_update=True)
    assert "Seq Scan on flight_gate" not in plan, plan
    assert "flight_gate_pkey" in plan, plan
    assert {f: s.fields for f, s in states.items()} == {s.flid: s.fields for s in flights[:64]}
