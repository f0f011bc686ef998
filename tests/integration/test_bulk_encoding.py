"""Decision P31: a snapshot's rows go by COPY in PostgreSQL's binary format, and what is
stored is what the text format stored (FS §5.4: what is stored equals the in-memory state), for
texts that need escaping in the text format too. Where a value is not of its column's type (a
``now`` without a time zone), the main rows keep the text format. Its FLID lists go as one
``text[]`` literal (``bulk.TextArray``), which reaches the server as the same texts."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from types import MappingProxyType

import psycopg
import pytest
from psycopg.adapt import PyFormat

from msgx_engine.state.model import FlightState, freeze_entry
from msgx_engine.store import bulk, outbox
from msgx_engine.store.flights import _DETAIL_COLUMNS, _MAIN_COLUMNS, FlightRepository
from msgx_engine.store.outbox import OutboxRow

# every character the text format escapes, its NULL spelling, and some that are not ASCII
AWKWARD = ("tab\there", "line\nbreak", "back\\slash", "\\N", "cr\rlf", "é机场✈", "", "quote\"'")
NOW = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)
N = 600          # over COPY's threshold


def awkward(n: int, version: int = 1) -> FlightState:
    text = AWKWARD[n % len(AWKWARD)] or "x"
    fields = {"STND": text, "FLNO": f"MU{n}",
              "GTDT": (freeze_entry({"GTNO": "1", "GATE": text}), freeze_entry({"GTNO": "2", "GATE": f"G{n}"})),
              "DELY": (freeze_entry({"CODE": "93", "TEXT": text}),),
              "FDIV": freeze_entry({"DDES": "HKG", "DDIR": "TO", "TEXT": text}),
              "ERUT": (freeze_entry({"RTNO": "1", "APCD": text}),)}
    return FlightState(flid=f"B{n:05d}", fields=MappingProxyType(dict(sorted(fields.items()))),
                       state_version=version, last_message_id=7, stamps=MappingProxyType({"BASE": 7}))


@pytest.fixture
def formats(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each COPY went binary (``bulk._copy`` itself runs)."""
    seen: list[bool] = []
    real = bulk._copy

    def spy(cur, table, columns, rows, types):
        seen.append(types is not None)
        return real(cur, table, columns, rows, types)

    monkeypatch.setattr(bulk, "_copy", spy)
    return seen


def stored(app, flids: list[str]) -> dict[str, list[tuple]]:
    """Every stored column but the server's own timestamps, per table, in key order."""
    tables = {"flight_schd": _MAIN_COLUMNS, **_DETAIL_COLUMNS}
    out: dict[str, list[tuple]] = {}
    with app.engine.connect() as conn:
        for table, columns in tables.items():
            cols = ", ".join(columns)
            out[table] = [tuple(r) for r in conn.exec_driver_sql(
                f"SELECT {cols} FROM {table} WHERE flid = ANY(%(f)s) ORDER BY {cols}", {"f": flids})]
    return out


def test_p31_every_copied_table_has_column_types_psycopg_can_write() -> None:
    """The metadata's type names are ones psycopg's binary COPY knows, for every COPY the store runs."""
    copies = [("flight_schd", _MAIN_COLUMNS), *_DETAIL_COLUMNS.items(),
              ("msg_event", outbox._ROW_COLUMNS), ("msg_event", outbox._RELEASED_COLUMNS)]
    for table, columns in copies:
        names = bulk.column_types(table, tuple(columns))
        assert len(names) == len(columns)
        assert all(psycopg.adapters.types.get(name) is not None for name in names), (table, names)


def test_p31_binary_rows_are_stored_as_the_text_format_stored_them(app, formats: list[bool],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """FS §5.4: the same states written by binary COPY and by text COPY store the same columns,
    awkward texts included, and read back equal to the states; the upsert of their next versions
    (``copy_upsert``, binary too) as well."""
    binary = [awkward(n) for n in range(N)]
    new = {s.flid for s in binary}      # no stored row: COPY writes flight_schd itself (P24, C2)
    with app.engine.begin() as conn:
        FlightRepository(conn).persist_next_states(binary, now=NOW, unstored=new)
    assert formats and all(formats), "every COPY went binary"
    written_binary = stored(app, [s.flid for s in binary])

    real = bulk.copy_rows
    monkeypatch.setattr(bulk, "copy_rows", lambda *a, binary=False, **k: real(*a, **k))
    formats.clear()
    with app.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM flight_schd")
        for table in _DETAIL_COLUMNS:
            conn.exec_driver_sql(f"DELETE FROM {table}")
        FlightRepository(conn).persist_next_states(binary, now=NOW, unstored=new)
    assert formats and not any(formats), "every COPY went as text"
    assert stored(app, [s.flid for s in binary]) == written_binary
    monkeypatch.setattr(bulk, "copy_rows", real)

    with app.engine.connect() as conn:
        loaded = FlightRepository(conn).load([s.flid for s in binary])
    assert {s.flid: s.fields for s in binary} == {f: s.fields for f, s in loaded.items()}

    formats.clear()
    nxt = [FlightState(flid=b.flid, fields=awkward(n + 1).fields, state_version=2, last_message_id=8)
           for n, b in enumerate(binary)]
    with app.engine.begin() as conn:
        FlightRepository(conn).persist_next_states(nxt, now=NOW)
    assert formats and all(formats)
    with app.engine.connect() as conn:
        loaded = FlightRepository(conn).load([s.flid for s in nxt])
    assert {s.flid: (s.fields, 2) for s in nxt} == {f: (s.fields, s.state_version) for f, s in loaded.items()}


def test_p31_a_time_without_a_zone_keeps_the_main_rows_as_text(app, formats: list[bool]) -> None:
    """A caller's ``now`` without a time zone cannot go binary into ``timestamptz``: the main rows
    go as text (the server reads it in its zone), the detail rows still binary; nothing fails."""
    states = [awkward(n) for n in range(N)]
    with app.engine.begin() as conn:
        FlightRepository(conn).persist_next_states(states, now=datetime(2026, 12, 3, 10, 0))
    assert formats[0] is False and all(formats[1:])
    with app.engine.connect() as conn:
        assert len(FlightRepository(conn).load([s.flid for s in states])) == N


def test_p31_outbox_rows_go_binary_and_a_release_time_without_a_zone_as_text(app, formats: list[bool]) -> None:
    """The outbox rows of a snapshot go binary, their payloads stored as built; released with a
    time without a zone (no caller does), they go as text."""
    rows = [OutboxRow(9, f"B{n:05d}", "schd", "state", 1, json.dumps({"FLID": AWKWARD[n % len(AWKWARD)]},
                                                                      ensure_ascii=False)) for n in range(N)]
    with app.engine.begin() as conn:
        outbox.insert(conn, rows)
        outbox.insert(conn, [replace(r, msg_id=10) for r in rows], released_at=datetime(2026, 12, 3, 10, 0))
    assert formats == [True, False]
    with app.engine.connect() as conn:
        payloads = [r[0] for r in conn.exec_driver_sql(
            "SELECT payload FROM msg_event WHERE msg_id = 9 ORDER BY event_id")]
    assert payloads == [r.payload for r in rows]


@pytest.mark.parametrize("values", [
    [],
    ["F000001", "F000002"],
    ['quo"te', "back\\slash", "a,b", "{brace}", " spaced ", "NULL", "", "é机场", "tab\there", "line\nbreak"],
])
def test_p31_a_text_array_reaches_the_server_as_the_same_texts(app, values: list[str]) -> None:
    """``bulk.TextArray`` (the snapshot's FLID lists as one literal built in C) reaches the server
    as exactly its texts, in order: quotes, backslashes, commas, braces, blanks and ``NULL`` too."""
    with app.engine.connect() as conn:
        got = [r[0] for r in conn.exec_driver_sql("SELECT unnest(%(f)s::text[])", {"f": bulk.TextArray(values)})]
        count = conn.exec_driver_sql("SELECT cardinality(%(f)s::text[])", {"f": bulk.TextArray(values)}).scalar_one()
    assert got == values and count == len(values)
    assert psycopg.adapters.get_dumper(bulk.TextArray, PyFormat.AUTO) is bulk._TextArrayDumper
