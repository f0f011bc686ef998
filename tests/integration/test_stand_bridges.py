"""Stand -> airbridge through the real pump (US-14, US-05 AC6, D27, C-31): the mapping comes from
the ABDG reference data in PostgreSQL; every stand a flight names carries its airbridges in the
stored state, the ``schd`` payload, ``GET /all/flights`` and ``msgx flights``; an ABDG change
re-derives the affected live flights in its own transaction."""

from __future__ import annotations

import json
import logging

from builders import envelope, flop, gate
from snapshot_builders import dnld, events, fltr, pump, query, status
from sqlalchemy import text

from msgx_engine.http.flights import current_flights_json
from msgx_engine.store.bridges import mapping_status


def abdg(styp: str, *records: tuple[str, tuple[str, ...]]) -> str:
    body = f"\t<RECS>{len(records)}</RECS>\n" + "".join(
        f"\t<ABDG><ABCD>{code}</ABCD>" + "".join(f"<STND>{s}</STND>" for s in stands) + "</ABDG>\n"
        for code, stands in records)
    return envelope("ABDG", styp, body)


def psdt(flid: str, *stands: str) -> str:
    return flop("PSDT", flid, "".join(f'\t\t<PSDT PSNO="{n}"><PSST>{s}</PSST></PSDT>\n'
                                      for n, s in enumerate(stands, start=1)))


def flight(app, flid: str) -> dict:
    return next(d for d in json.loads(current_flights_json(app.engine)) if d["FLID"] == flid)


def airbridges(doc: dict) -> tuple[list, object]:
    return [e["ABDG"] for e in doc.get("PSDT", [])], doc.get("STND_ABDG", "absent")


def test_a_snapshot_publishes_the_airbridges_everywhere_us14(app, msgx):
    """US-05 AC6, US-14 AC2, D27: after an ABDG DNLD, a SCHD DNLD's flights carry, per PSDT entry and
    for STND, the airbridges serving the stand; stored with the state, identical in the schd event,
    GET /all/flights and ``msgx flights``."""
    m1, m2 = pump(app, abdg("DNLD", ("A1", ("501",)), ("A2", ("501", "504")), ("B7", ("777",))),
                  dnld(fltr("F1", stnd="504", stands=2), fltr("F2", stnd="R9")))
    assert status(app, m1) == status(app, m2) == ("SUCCEEDED", None)
    f1, f2 = flight(app, "F1"), flight(app, "F2")
    assert airbridges(f1) == ([["A1", "A2"], []], ["A2"])           # PSST 501, 502; STND 504
    assert airbridges(f2) == ([], [])
    ((stored,),) = query(app, "SELECT stand_bridges FROM flight_schd WHERE flid = 'F1'")
    assert json.loads(stored) == {"501": ["A1", "A2"], "502": [], "504": ["A2"]}
    (payload,) = [p for (p,) in query(app, "SELECT payload FROM msg_event WHERE msg_id = :m AND flid = 'F1'", m=m2)]
    assert json.loads(payload) == f1
    code, listed = msgx("flights")
    assert code == 0 and next(d for d in listed if d["FLID"] == "F1") == f1


def test_an_abdg_change_rederives_the_affected_live_flights_in_its_transaction_d27(app):
    """D27: an ABDG UPD giving stand 501 a second airbridge rewrites F1 (stand 501) with
    state_version+1, last_message_id = the ABDG message and msg/schd events in that message;
    F2 (stand 900, unaffected) and the deleted F3 are not touched."""
    pump(app, abdg("DNLD", ("A1", ("501",))), psdt("F1", "501"), psdt("F2", "900"), psdt("F3", "501"),
         flop("FDEL", "F3", "\t\t<FDEL></FDEL>\n"))
    before = {r[0]: r[1:] for r in query(app, "SELECT flid, state_version, stand_bridges FROM flight_schd")}
    (m,) = pump(app, abdg("UPD", ("A0", ("501", "502"))))
    assert status(app, m) == ("SUCCEEDED", None)
    after = {r[0]: r[1:] for r in query(app, "SELECT flid, state_version, stand_bridges, last_message_id "
                                             "FROM flight_schd")}
    assert after["F1"][0] == before["F1"][0] + 1 and after["F1"][2] == m
    assert json.loads(after["F1"][1]) == {"501": ["A0", "A1"]}
    assert after["F2"][:2] == before["F2"] and after["F3"][:2] == before["F3"]
    assert [(f, t) for f, t, _, _ in events(app, m)] == [("F1", "msg"), ("F1", "schd")]
    ((change,),) = query(app, "SELECT payload FROM msg_event WHERE msg_id = :m AND topic = 'msg'", m=m)
    change = json.loads(change)
    assert (change["TYPE"], change["STYP"], change["CHANGES"]) == (
        "ABDG", "UPD", {"PSDT": [{"ABDG": ["A0", "A1"], "PSNO": "1", "PSST": "501"}]})


def test_an_abdg_change_reads_only_the_flights_on_the_stands_it_changes_d27(app):
    """D27: the re-derivation looks only at flights on stands whose airbridges changed, so its cost
    does not grow with the days of flights stored. Witness: F2's stored airbridges are tampered
    with behind msgx's back on stand 900, which the ABDG UPD leaves alone: F2 is not rewritten,
    while F1 (stand 502, which the UPD gives a second airbridge) is; a repeated download identical to
    the stored mapping rewrites nothing; a DNLD that moves stand 900 repairs F2."""
    pump(app, abdg("DNLD", ("A1", ("501", "900")), ("A2", ("502",))), psdt("F1", "502"), psdt("F2", "900"))
    with app.engine.begin() as conn:
        conn.execute(text("UPDATE flight_schd SET stand_bridges = :v WHERE flid = 'F2'"), {"v": '{"900": ["Z9"]}'})
    version = dict(query(app, "SELECT flid, state_version FROM flight_schd"))
    (m,) = pump(app, abdg("UPD", ("A3", ("502",))))
    assert status(app, m) == ("SUCCEEDED", None)
    assert [(f, t) for f, t, _, _ in events(app, m)] == [("F1", "msg"), ("F1", "schd")]
    after = dict(query(app, "SELECT flid, state_version FROM flight_schd"))
    assert after == {"F1": version["F1"] + 1, "F2": version["F2"]}
    (same,) = pump(app, abdg("DNLD", ("A1", ("501", "900")), ("A2", ("502",)), ("A3", ("502",))))
    assert status(app, same) == ("SUCCEEDED", None) and events(app, same) == []
    (moved,) = pump(app, abdg("DNLD", ("A1", ("501",)), ("A2", ("502",)), ("A3", ("502",)), ("A4", ("900",))))
    assert [(f, t) for f, t, _, _ in events(app, moved)] == [("F2", "msg"), ("F2", "schd")]
    ((stored,),) = query(app, "SELECT stand_bridges FROM flight_schd WHERE flid = 'F2'")
    assert json.loads(stored) == {"900": ["A4"]}


def test_records_added_before_any_full_load_are_not_a_mapping_us14_ac3(app, caplog):
    """US-14 AC3: with only an ABDG ADD (no DNLD/RESP ever) the mapping is unknown: the flight is
    still written (SUCCEEDED, the queue does not wait) with ABDG null, an ALERT is logged and the
    asset check's figures say so; the first DNLD then re-derives it."""
    with caplog.at_level(logging.ERROR):
        add, m = pump(app, abdg("ADD", ("A1", ("501",))), psdt("F1", "501"))
    assert status(app, m) == ("SUCCEEDED", None)
    assert airbridges(flight(app, "F1")) == ([None], "absent")
    assert any("ALERT" in r.message and "mapping missing" in r.message for r in caplog.records)
    with app.engine.connect() as conn:
        assert (mapping_status(conn).loaded, mapping_status(conn).flights_unknown) == (False, 1)
    (full,) = pump(app, abdg("DNLD", ("A1", ("501",))))
    assert airbridges(flight(app, "F1")) == ([["A1"]], "absent")
    with app.engine.connect() as conn:
        assert (mapping_status(conn).loaded, mapping_status(conn).flights_unknown) == (True, 0)
    assert query(app, "SELECT rtype, msg_id FROM ref_load") == [("ABDG", full)]


def test_only_flights_naming_a_stand_count_as_unknown_airbridges_us14_ac3(app):
    """US-14 AC3's health figure (read from a partial index of the flights storing no airbridges,
    0017): a stand written before any full load counts; a flight with no stand does not."""
    pump(app, abdg("ADD", ("A1", ("501",))), psdt("F1", "501"), flop("GTDT", "F2", gate(1, "G1")))
    with app.engine.connect() as conn:
        assert mapping_status(conn).flights_unknown == 1


def test_an_empty_full_load_makes_every_stand_remote_not_unknown_us14_ac3(app):
    """A DNLD with no airbridge at all is a known, empty mapping: [] everywhere, never null."""
    pump(app, abdg("DNLD", ("A1", ("501",))), psdt("F1", "501"))
    (m,) = pump(app, envelope("ABDG", "DNLD", "\t<RECS>0</RECS>\n"))
    assert status(app, m) == ("SUCCEEDED", None)
    assert airbridges(flight(app, "F1")) == ([[]], "absent")


def test_a_truncated_full_load_is_refused_and_changes_nothing_inv27(app):
    """INV-27, US-14 AC3 (decision L4; issue reproduction): an ABDG DNLD announcing RECS 30 with no
    record, or a RESP carrying fewer records than its RECS, is DEAD(records_mismatch): the mapping,
    its full-load record and every flight stay as they were, no event is written, and the stand
    keeps its airbridge. An intended clear (RECS 0, no record) stays possible."""
    first, _ = pump(app, abdg("DNLD", ("A1", ("501",)), ("A2", ("502",))), psdt("F1", "501"))
    before = (query(app, "SELECT rtype, rkey, fields FROM ref_master ORDER BY rkey"),
              query(app, "SELECT rtype, msg_id FROM ref_load"),
              query(app, "SELECT flid, state_version, stand_bridges FROM flight_schd"))
    with app.engine.begin() as conn:
        conn.execute(text("INSERT INTO req_track (rtype, styp, status, sent_at) "
                          "VALUES ('RQRD', 'ABDG', 'SENT', :t)"), {"t": app.clock.now()})
    empty, short = pump(app, envelope("ABDG", "DNLD", "\t<RECS>30</RECS>\n"),
                        envelope("ABDG", "RESP", "\t<RECS>2</RECS>\n\t<ABDG><ABCD>A1</ABCD><STND>501</STND></ABDG>\n",
                                 dttm="20260101080000"))
    assert status(app, empty) == status(app, short) == ("DEAD", "records_mismatch")
    ((detail,),) = query(app, "SELECT error_detail FROM proc_state WHERE msg_id = :m", m=empty)
    assert "RECS 30 but carries 0" in detail
    assert (query(app, "SELECT rtype, rkey, fields FROM ref_master ORDER BY rkey"),
            query(app, "SELECT rtype, msg_id FROM ref_load"),
            query(app, "SELECT flid, state_version, stand_bridges FROM flight_schd")) == before
    assert events(app, empty) == [] and events(app, short) == []
    assert airbridges(flight(app, "F1")) == ([["A1"]], "absent")
    assert query(app, "SELECT status FROM req_track") == [("SENT",)]    # a refused answer completes nothing

    (clear,) = pump(app, envelope("ABDG", "DNLD", "\t<RECS>0</RECS>\n"))
    assert status(app, clear) == ("SUCCEEDED", None)
    assert airbridges(flight(app, "F1")) == ([[]], "absent")
