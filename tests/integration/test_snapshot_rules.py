"""Snapshot rules through the real pump: D1/D3/D6, package validation, RESP matching, ledger CAS,
empty packages, and the interplay with FDEL and ADFT."""

from __future__ import annotations

import json
from datetime import date

import pytest
from builders import envelope, gtdt
from snapshot_builders import (
    day_package,
    dnld,
    events,
    flights,
    fltr,
    ledger,
    members,
    pump,
    query,
    schd,
    sodt,
    status,
    whole_state,
)
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from msgx_engine.pipeline import routing
from msgx_engine.pipeline.routing import Route

D9, D10 = date(2026, 9, 9), date(2026, 9, 10)


def _gates(app, flid):
    return query(app, "SELECT ordinal, gate FROM flight_gate WHERE flid = :f ORDER BY ordinal", f=flid)


def _scalar(app, flid, column):
    return query(app, f"SELECT {column} FROM flight_schd WHERE flid = :f", f=flid)[0][0]


def test_late_earlier_day_snapshot_does_not_take_back_a_later_day_flight(app):
    """D3 (FS §3.3 constraint 4 closed): C belongs to 9/10; a late 9/9 snapshot that still lists C
    leaves C's day, fields, version and events alone, counts it and names it in schd_gen_run."""
    pump(app, dnld(fltr("A", sodt(9)), fltr("C", sodt(9), stnd="OLD")))
    (m10,) = pump(app, dnld(fltr("C", sodt(10), stnd="NEW")))
    c_before = flights(app)["C"]
    assert c_before == (D10, False, 2)

    (late,) = pump(app, dnld(fltr("A", sodt(9), stnd="505"), fltr("C", sodt(9), stnd="OLD")))   # A changed
    assert status(app, late) == ("SUCCEEDED", None)
    assert flights(app)["C"] == c_before
    assert _scalar(app, "C", "stnd") == "NEW"
    assert _scalar(app, "C", "last_message_id") == m10
    assert events(app, late) == [("A", "schd", "state", 2)]
    assert members(app)[D9] == {"A", "C"}
    assert query(app, "SELECT kept_later, kept_later_flids, written FROM schd_gen_run WHERE msg_id = :m",
                 m=late) == [(1, '["C"]', 1)]


def test_snapshot_clears_omitted_fields_and_wins_over_dynamic_updates(app):
    """D1/C-26/INV-15b: fields the snapshot omits are cleared (columns NULL, detail rows gone);
    D6 (rule M): a same-day snapshot overrides a dynamic GTDT applied in between."""
    pump(app, dnld(fltr("A", sodt(9), gates=2, desks=1, stands=1)))
    assert _gates(app, "A") == [(1, "G1A"), (2, "G2A")]
    pump(app, gtdt("A", (1, "Z9")))
    assert _gates(app, "A") == [(1, "Z9")]

    (m,) = pump(app, dnld(fltr("A", sodt(9), stnd=None, gates=1)))
    assert _gates(app, "A") == [(1, "G1A")]
    assert _scalar(app, "A", "stnd") is None
    assert query(app, "SELECT count(*) FROM flight_checkin WHERE flid = 'A'") == [(0,)]
    assert query(app, "SELECT count(*) FROM flight_stand_plan WHERE flid = 'A'") == [(0,)]
    (payload,) = query(app, "SELECT payload FROM msg_event WHERE msg_id = :m", m=m)[0]
    doc = json.loads(payload)
    assert doc["GTDT"] == [{"GATE": "G1A", "GTNO": "1", "GTYP": "D", "PGCT": "09SEP260735", "PGOT": "09SEP260705"}]
    assert "STND" not in doc and "CKDT" not in doc and doc["FDAY"] == "2026-09-09"


@pytest.mark.parametrize("xml, reason", [
    (day_package(["A", "X"], 9).replace("<RECS>2</RECS>", "<RECS>3</RECS>"), "malformed"),
    (dnld(fltr("A", sodt(9)), fltr("A", sodt(9))), "malformed"),
    (dnld(fltr("A", sodt(9)), fltr("", sodt(9))), "malformed"),
    (dnld(fltr("A", sodt(9), extra="<NOPE>1</NOPE>")), "malformed"),
    (dnld(fltr("A", sodt(9), extra='<GTDT GTNO="0"/><GTDT GTNO="2"><GATE>B</GATE></GTDT>')), "malformed"),
    (dnld(fltr("A", "garbage")), "malformed"),
    (dnld("".join(f"<FLTR><FLID>F{i}</FLID></FLTR>" for i in range(10_001)), recs=10_001), "oversize"),
])
def test_validation_failure_leaves_everything_as_before(app, xml, reason):
    """INV-19, D5, US-06 AC1: a package that fails a check is DEAD and changes nothing: no flight,
    ledger, member list, detail row, event or run record; it is still backfilled."""
    pump(app, day_package(["A", "B"], 9), gtdt("B", (1, "K1")))
    before = whole_state(app)
    (m,) = pump(app, xml)
    assert status(app, m) == ("DEAD", reason)
    assert whole_state(app) == before
    assert app.mailbox.processed_at([m])[m] is not None


def _resp(*records: str, **kw) -> str:
    return schd("RESP", *records, **kw)


def _request(app, fday: date, status_: str = "SENT") -> int:
    with app.engine.begin() as conn:
        return conn.execute(text(
            "INSERT INTO req_track (rtype, styp, fday, status, sent_at) VALUES ('RQFD', 'NONE', :d, :s, :t) "
            "RETURNING req_id"), {"d": fday, "s": status_, "t": app.clock.now()}).scalar_one()


def test_resp_without_an_open_request_is_skipped_and_writes_nothing(app):
    """D16, US-06 AC2, C-23: a RESP with no RQFD sent is SKIPPED(no_request); one registered more
    than 60 s after its request was sent (here timed out) is SKIPPED(late_answer); state, ledger
    and events are untouched either way."""
    pump(app, day_package(["A"], 9))
    before = whole_state(app)
    (m,) = pump(app, _resp(fltr("B", sodt(9))))
    assert status(app, m) == ("SKIPPED", "no_request")
    _request(app, D9, "TIMEOUT")
    app.clock.advance(61)
    (late,) = pump(app, _resp(fltr("B", sodt(9))))
    assert status(app, late) == ("SKIPPED", "late_answer")
    assert whole_state(app) == before


def test_resp_applies_to_its_own_day_and_completes_the_request(app):
    """D23, US-06 AC4: a RESP whose package covers 9/10 answers the SENT RQFD for 9/10, diff-deletes
    against 9/10 and sets the request DONE with answer_msg_id in the same transaction. A DNLD does
    not complete requests (US-06 table). (Its day is the package's own: a RESP for another day than
    the request's is skipped, tests/integration/test_resp_matching.py.)"""
    req = _request(app, D10)
    (d,) = pump(app, day_package(["A", "B"], 10))
    assert query(app, "SELECT status FROM req_track WHERE req_id = :r", r=req) == [("SENT",)]

    (m,) = pump(app, _resp(fltr("A", sodt(10)), dttm="20260101090000"))
    assert status(app, m) == ("SUCCEEDED", None)
    assert ledger(app) == {D10: (2, m)}
    assert flights(app) == {"A": (D10, False, 2), "B": (D10, True, 2)}
    assert query(app, "SELECT status, answer_msg_id FROM req_track WHERE req_id = :r", r=req) == [("DONE", m)]
    assert query(app, "SELECT req_id, styp FROM schd_gen_run WHERE msg_id = :m", m=m) == [(req, "RESP")]

    (again,) = pump(app, _resp(fltr("A", sodt(10)), dttm="20260101090000"))
    assert status(app, again) == ("SKIPPED", "late_answer")        # its request is DONE already


def test_resp_older_than_its_request_is_skipped(app):
    """US-06 AC2: an answer whose DTTM precedes the request's sent time is not its answer."""
    req = _request(app, D9)               # sent at the ManualClock's 2026-01-01 00:00 UTC = 08:00 local
    (m,) = pump(app, _resp(fltr("A", sodt(9)), dttm="20260101075900"))
    assert status(app, m) == ("SKIPPED", "no_request")
    assert flights(app) == {}
    assert query(app, "SELECT status FROM req_track WHERE req_id = :r", r=req) == [("SENT",)]


def test_version_cas_miss_fails_as_infra_and_the_retry_converges(app, monkeypatch):
    """FS §3.3 step 5, US-06 AC3: when schd_gen moves between the locked read and the write, the
    whole transaction rolls back, the message is FAILED(INFRA), and the retry re-reads and succeeds."""
    (m1,) = pump(app, day_package(["A", "B"], 9))
    original = routing.ROUTES[("SCHD", "DNLD")]
    bumped = []

    other_engine = create_engine(app.settings.db_url, poolclass=NullPool)   # a foreign writer

    def load_then_bump(conn, msg, msg_id):
        ctx = original.load(conn, msg, msg_id)
        if not bumped:
            with other_engine.begin() as other:
                other.execute(text("UPDATE schd_gen SET version = 5 WHERE fday = :d"), {"d": D9})
            bumped.append(True)
        return ctx

    monkeypatch.setitem(routing.ROUTES, ("SCHD", "DNLD"), Route(load_then_bump, original.decide))
    before = whole_state(app)
    (m2,) = pump(app, day_package(["A"], 9))
    assert query(app, "SELECT status, error_class FROM proc_state WHERE msg_id = :m", m=m2) == [("FAILED", "INFRA")]
    assert whole_state(app)[1:] == before[1:]            # flights, members, events, details, runs
    assert ledger(app) == {D9: (5, m1)}                   # only the foreign bump

    app.clock.advance(2)
    pump(app)
    assert status(app, m2) == ("SUCCEEDED", None)
    assert ledger(app) == {D9: (6, m2)}
    assert flights(app) == {"A": (D9, False, 2), "B": (D9, True, 2)}


def _fdel(flid: str) -> str:
    return envelope("FLOP", "FDEL", f"<FLOP><FLID>{flid}</FLID><FDEL></FDEL></FLOP>\n")


def test_fdel_then_snapshot(app):
    """FDEL + snapshot interplay (D2, INV-15b): a flight FDEL deleted is not deleted again (no
    second tombstone) by a snapshot that omits it; a later snapshot that lists it again restores
    it, because the day's snapshot is AODB's complete current list."""
    pump(app, day_package(["A", "B"], 9))
    (fdel,) = pump(app, _fdel("B"))
    assert status(app, fdel) == ("SUCCEEDED", None)
    assert flights(app)["B"] == (D9, True, 2)

    (m2,) = pump(app, day_package(["A"], 9))
    assert events(app, m2) == [("A", "schd", "state", 2)]
    assert flights(app)["B"] == (D9, True, 2)

    (m3,) = pump(app, day_package(["A", "B"], 9))
    assert flights(app)["B"] == (D9, False, 3)
    assert ("B", "schd", "state", 3) in events(app, m3)
    assert _scalar(app, "B", "deleted_at") is None


def test_snapshot_delete_then_fdel_is_a_no_op(app):
    """FDEL of a flight the snapshot already deleted changes nothing (its version stays)."""
    pump(app, day_package(["A", "B"], 9), day_package(["A"], 9))
    assert flights(app)["B"] == (D9, True, 2)
    (fdel,) = pump(app, _fdel("B"))
    assert status(app, fdel)[0] == "SUCCEEDED"
    assert flights(app)["B"] == (D9, True, 2)


def _adft(flid: str) -> str:
    return schd("ADFT", fltr(flid, sodt(9), stnd="ADHOC"))


def test_adft_after_a_snapshot_delete_restores_the_flight(app):
    """INV-29: ADFT for a flight the snapshot soft-deleted restores it with the ADFT's content,
    advances its version and emits its state. It keeps its day and rejoins that day's member list
    (decision L8), so the day's next snapshot without it deletes it again (FS §3.3 constraint 2)."""
    pump(app, day_package(["A", "B"], 9), day_package(["A"], 9))
    assert flights(app)["B"] == (D9, True, 2)

    (adft,) = pump(app, _adft("B"))
    assert status(app, adft) == ("SUCCEEDED", None)
    assert flights(app)["B"] == (D9, False, 3)
    assert _scalar(app, "B", "stnd") == "ADHOC"
    assert ("B", "schd", "state", 3) in events(app, adft)

    (m1,) = pump(app, day_package(["A"], 9))
    assert flights(app)["B"] == (D9, True, 4)
    assert ("B", "schd", "tombstone", 4) in events(app, m1)


