"""Seasonal schedules (SCHS DNLD/RESP): stored per season (SNAM, SDAT, EDAT), replaced
whole, never touching flight_schd, the daily ledger or the outbox."""

from __future__ import annotations

import pytest
from snapshot_builders import day_package, pump, query, season, status, whole_state


def _season_rows(app):
    return {
        "seasons": query(app, "SELECT snam, sdat, edat, apcd, recs, version FROM season_sched ORDER BY snam, sdat"),
        "flights": query(app, "SELECT snam, ordinal, alcd, flno, dyop, scht, stdt, eddt FROM season_flight "
                              "ORDER BY snam, sdat, ordinal"),
        "routes": query(app, "SELECT snam, flight_ordinal, route_kind, ordinal, source_seq, "
                             "apcd, scat, scdt, sadc, sddc "
                             "FROM season_route_point ORDER BY snam, sdat, flight_ordinal, route_kind, ordinal"),
    }


def test_sample_seasons_are_stored_whole(app, samples):
    """The SCHS samples (DNLD and RESP) land in the season tables with every element; the flight
    state, daily ledger and outbox stay empty."""
    (dnld_id,) = pump(app, (samples / "SCHS" / "01_DNLD.xml").read_text())
    assert status(app, dnld_id) == ("SUCCEEDED", None)
    rows = _season_rows(app)
    assert rows["seasons"] == [("Winter", "10SEP20", "10JUN21", "CTU", 2, 1)]
    assert rows["flights"] == [("Winter", 1, "LH", "LH724", "1200560", "1023", "14NOV21", "14MAR21"),
                               ("Winter", 2, "CA", "CA002", "1234567", "1023", "11OCT19", "10MAY21")]
    assert rows["routes"][:3] == [
        ("Winter", 1, "ERUT", 1, "1", "CTU", "14MAR211023", "14MAR211023", "+1", "-2"),
        ("Winter", 1, "ERUT", 2, "2", "HKG", "14MAR211023", "14MAR211023", "+1", "-2"),
        ("Winter", 1, "ERUT", 3, "3", "LON", "14MAR211023", "14MAR211023", "+1", "-2")]
    assert ("Winter", 1, "ROUT", 2, "2", "LON", "1125", None, None, None) in rows["routes"]
    assert len(rows["routes"]) == 5 + 3
    assert query(app, "SELECT count(*) FROM flight_schd") == [(0,)]
    assert query(app, "SELECT count(*) FROM msg_event") == [(0,)]
    assert query(app, "SELECT count(*) FROM schd_gen") == [(0,)]

    # The RESP sample is a different message with the same SEQN: an identity conflict (INV-9),
    # so it is sent here with its own SEQN to show RESP replaces the season like DNLD does.
    resp = (samples / "SCHS" / "02_RESP.xml").read_text().replace("<SEQN>124311</SEQN>", "<SEQN>124312</SEQN>")
    (resp_id,) = pump(app, resp)
    assert status(app, resp_id) == ("SUCCEEDED", None)
    rows = _season_rows(app)
    assert rows["seasons"] == [("Winter", "10SEP20", "10JUN21", "CTU", 2, 2)]
    assert [r[6] for r in rows["flights"]] == ["14NOV20", "11OCT20"]


def test_a_season_is_replaced_whole_and_other_seasons_and_flights_stay(app):
    """Replace-whole per key: the second Winter package drops CA002 and adds MU5; the Summer
    season and the daily flight state are untouched."""
    pump(app, day_package(["A"], 9), season(flights=("LH724", "CA002")),
         season(snam="Summer", sdat="01APR21", edat="30SEP21", flights=("ZH1",)))
    daily = whole_state(app)
    (m,) = pump(app, season(flights=("LH724", "MU5")))
    assert status(app, m) == ("SUCCEEDED", None)
    rows = _season_rows(app)
    assert rows["seasons"] == [("Summer", "01APR21", "30SEP21", "CTU", 1, 1),
                               ("Winter", "10SEP20", "10JUN21", "CTU", 2, 2)]
    assert [(r[0], r[3]) for r in rows["flights"]] == [("Summer", "ZH1"), ("Winter", "LH724"), ("Winter", "MU5")]
    assert len(rows["routes"]) == 3 * 3
    assert whole_state(app) == daily


def test_same_name_other_dates_is_another_season(app):
    """The key is (SNAM, SDAT, EDAT): a Winter with other dates is stored beside the first."""
    pump(app, season(), season(sdat="10SEP21", edat="10JUN22", flights=("X1",)))
    assert [r[:3] for r in _season_rows(app)["seasons"]] == [("Winter", "10SEP20", "10JUN21"),
                                                             ("Winter", "10SEP21", "10JUN22")]


@pytest.mark.parametrize("xml, reason", [
    (season(recs=3), "malformed"),
    (season(extra="<GTDT>1</GTDT>"), "malformed"),
    (season(snam=""), "malformed"),
    (season(sdat="2020-09-10"), "malformed"),
    (season().replace("<APCD>CTU</APCD>", "<APCD>CTU</APCD><WHAT/>"), "malformed"),
    (season(flights=tuple(f"X{i}" for i in range(10_001))), "oversize"),
])
def test_invalid_season_changes_nothing(app, xml, reason):
    """INV-19 applied to seasons: a failing package is DEAD and the stored season stays."""
    pump(app, season())
    before = _season_rows(app)
    (m,) = pump(app, xml)
    assert status(app, m) == ("DEAD", reason)
    assert _season_rows(app) == before


def test_season_replay_of_the_last_message_changes_nothing(app):
    """Replay short-circuit (as FS §3.3 step 2): the season's last message run again keeps the
    version and rows."""
    from sqlalchemy import text

    (m,) = pump(app, season())
    before = _season_rows(app)
    with app.engine.begin() as conn:
        conn.execute(text("UPDATE proc_state SET status = 'PENDING', applied_at = NULL WHERE msg_id = :m"), {"m": m})
    pump(app)
    assert status(app, m) == ("SUCCEEDED", None)
    assert _season_rows(app) == before
