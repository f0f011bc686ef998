"""Reference data through the real pump into ``ref_master`` (D17, D9, D16, INV-26, INV-27, US-08 AC5).

Real PostgreSQL and MariaDB: every reference sample of the public corpus, replace/upsert/delete
semantics, malformed messages leaving everything as it was, and RESP matching its RQRD.
"""

from __future__ import annotations

import csv
import json
import logging
import re
from datetime import datetime, timedelta

import pytest
from builders import envelope, next_seqn
from snapshot_builders import pump, query, status
from sqlalchemy import text

from msgx_engine.handlers.reference import record_shape
from msgx_engine.sis.catalogue import REFERENCE_TYPES
from msgx_engine.sis.times import dttm_local


def _rows(app, rtype: str | None = None) -> dict[tuple[str, str], dict]:
    sql = "SELECT rtype, rkey, fields FROM ref_master" + (" WHERE rtype = :t" if rtype else "")
    return {(t, k): json.loads(f) for t, k, f in query(app, sql, t=rtype)}


def _keys(app, rtype: str) -> set[str]:
    return {k for _, k in _rows(app, rtype)}


def query_commit(app, sql: str, **params):
    with app.engine.begin() as conn:
        return conn.execute(text(sql), params)


def _request(app, rtype: str, sent_at: datetime, status_: str = "SENT") -> int:
    return query_commit(app, "INSERT INTO req_track (rtype, styp, status, sent_at) VALUES ('RQRD', :t, :s, :at) "
                             "RETURNING req_id", t=rtype, s=status_, at=sent_at).scalar_one()


def _clock_at(clock, when: datetime) -> None:
    """Move the ManualClock to ``when``: an answer is registered at the clock's time, and lateness
    is judged by that registration against the request's ``sent_at`` (C-23)."""
    clock.advance((when - clock.now()).total_seconds())


def _request_row(app, req: int) -> tuple:
    (row,) = query(app, "SELECT status, answer_msg_id, done_at IS NOT NULL FROM req_track WHERE req_id = :r", r=req)
    return row


def _fresh(xml: str) -> str:
    """A sample with a fresh SEQN: the samples share identities (INV-9 would skip the repeats)."""
    return re.sub(r"<SEQN>\s*\d+\s*</SEQN>", f"<SEQN>{next_seqn()}</SEQN>", xml, count=1)


def _ref_samples(samples) -> list[dict]:
    with open(samples / "INDEX.tsv", encoding="utf-8") as fh:
        return [r for r in csv.DictReader(fh, delimiter="\t") if r["TYPE"] in REFERENCE_TYPES]


def _ref(mtype: str, styp: str, *records: str, **kw) -> str:
    return envelope(mtype, styp, f"\t<RECS>{len(records)}</RECS>\n" + "".join(records), **kw)


def abdg(code: str, desc: str = "Bridge", extra: str = "") -> str:
    return f"\t<ABDG><ABCD>{code}</ABCD><DESC>{desc}</DESC>{extra}</ABDG>\n"


def glst(code: str, extra: str = "") -> str:
    return f"\t<GLST><GCOD>{code}</GCOD><GTML>T1</GTML>{extra}</GLST>\n"


def test_every_reference_sample_has_its_outcome(app, samples, caplog):
    """D17, D9, D16: all 97 reference samples in corpus order, each with a fresh SEQN. DNLD/ADD/UPD/
    DEL end SUCCEEDED, RESP (no request registered) SKIPPED(no_request), ABNR/03_ADD.xml (not
    well-formed) DEAD(malformed). No flight and no outbox event is touched; RECS mismatches
    (AIRC/01, FLTL/02) are logged, not rejected."""
    rows = _ref_samples(samples)
    assert len(rows) == 98 and sum(r["well_formed"] == "yes" for r in rows) == 97
    with caplog.at_level(logging.WARNING, logger="msgx_engine.store.reference"):
        ids = pump(app, *(_fresh((samples / r["file"]).read_text(encoding="utf-8")) for r in rows))
    for row, msg_id in zip(rows, ids, strict=True):
        expected = (("DEAD", "malformed") if row["well_formed"] != "yes" else
                    ("SKIPPED", "no_request") if row["STYP"] == "RESP" else ("SUCCEEDED", None))
        assert status(app, msg_id) == expected, row["file"]
    assert "RECS is '1' but 2 AIRC record(s)" in caplog.text and "RECS is '2' but 1 FLTL" in caplog.text
    assert query(app, "SELECT count(*) FROM flight_schd") == [(0,)]
    assert query(app, "SELECT count(*) FROM msg_event") == [(0,)]
    # AIRC: DNLD 312+320 (RECS said 1), ADD 310, DEL 312 (key only).
    assert _keys(app, "AIRC") == {"320", "310"}
    assert _rows(app, "AIRC")[("AIRC", "310")]["MTWT"] == "138600"
    # AIRL: the DNLD's three airlines, nested values as arrays.
    assert query(app, "SELECT source FROM ref_master WHERE rtype = 'AIRL' GROUP BY source") == [("AODB",)]
    types = {t for t, in query(app, "SELECT DISTINCT rtype FROM ref_master")}
    assert types <= REFERENCE_TYPES and len(types) >= 15


def test_every_reference_resp_sample_answers_its_request(app, samples, clock):
    """D16, US-08 AC5: each RESP sample with an open RQRD for its type sent before its DTTM is
    SUCCEEDED; the category becomes exactly the RESP's records and the request is DONE with the
    answer's mailbox id, in the same transaction."""
    resp = [r for r in _ref_samples(samples) if r["STYP"] == "RESP"]
    assert len(resp) == 13
    for row in resp:
        rtype, key = row["TYPE"], record_shape(row["TYPE"]).key
        sample = (samples / row["file"]).read_text(encoding="utf-8")
        req = _request(app, rtype, dttm_local(row["DTTM"]) - timedelta(seconds=1))
        _clock_at(clock, dttm_local(row["DTTM"]))           # registered a second after sending
        _, m = pump(app, _ref(rtype, "DNLD", f"<{rtype}><{key}>OLD</{key}></{rtype}>"), _fresh(sample))
        assert status(app, m) == ("SUCCEEDED", None), row["file"]
        assert _request_row(app, req) == ("DONE", m, True)
        assert _keys(app, rtype) == set(re.findall(rf"<{key}>([^<]+)</{key}>", sample)), row["file"]


def test_dnld_replaces_the_category_and_leaves_the_others(app, clock):
    """D17, INV-26: a DNLD replaces its category whole: rows missing from the new package are
    deleted, the others rewritten with source, batch_id (the mailbox id) and refreshed_at; another
    category is not touched."""
    first, gates = pump(app, _ref("ABDG", "DNLD", abdg("1"), abdg("2"), abdg("3")), _ref("GLST", "DNLD", glst("G1")))
    clock.advance(60)
    (second,) = pump(app, _ref("ABDG", "DNLD", abdg("2", "Renamed"), abdg("4")))
    assert status(app, second) == ("SUCCEEDED", None)
    assert _rows(app, "ABDG") == {("ABDG", "2"): {"ABCD": "2", "DESC": "Renamed"},
                                  ("ABDG", "4"): {"ABCD": "4", "DESC": "Bridge"}}
    assert query(app, "SELECT DISTINCT source, batch_id FROM ref_master WHERE rtype = 'ABDG'") == [("AODB", second)]
    assert query(app, "SELECT batch_id FROM ref_master WHERE rtype = 'GLST'") == [(gates,)]
    (newer,) = query(app, "SELECT max(refreshed_at) > min(refreshed_at) FROM ref_master")
    assert newer == (True,)


def test_empty_dnld_empties_its_category_only(app):
    """D17: a DNLD is the complete list, so an empty one (RECS 0) leaves the category empty."""
    pump(app, _ref("ABDG", "DNLD", abdg("1")), _ref("GLST", "DNLD", glst("G1")))
    (m,) = pump(app, _ref("ABDG", "DNLD"))
    assert status(app, m) == ("SUCCEEDED", None)
    assert _keys(app, "ABDG") == set() and _keys(app, "GLST") == {"G1"}


def test_add_upd_upsert_and_empty_means_no_current_value(app):
    """D17, INV-26: ADD/UPD upsert by key; an empty element is "no current value": the field leaves
    the JSON, the row stays; other rows of the category stay."""
    pump(app, _ref("GLST", "DNLD", glst("G1", "<PIER>P1</PIER>"), glst("G2")))
    add, upd = pump(app, _ref("GLST", "ADD", glst("G3")), _ref("GLST", "UPD", glst("G1", "<PIER></PIER>")))
    assert status(app, add) == status(app, upd) == ("SUCCEEDED", None)
    assert _rows(app, "GLST") == {("GLST", k): {"GCOD": k, "GTML": "T1"} for k in ("G1", "G2", "G3")}


def test_del_removes_by_key_whatever_the_record_carries(app):
    """D17: DEL deletes by key (key-only and full-record samples alike); an unknown key deletes
    nothing and still succeeds."""
    pump(app, _ref("GLST", "DNLD", glst("G1"), glst("G2"), glst("G3")))
    a, b = pump(app, _ref("GLST", "DEL", glst("G1", "<PIER>P9</PIER>")),
                _ref("GLST", "DEL", "<GLST><GCOD>G2</GCOD></GLST>", "<GLST><GCOD>NOPE</GCOD></GLST>"))
    assert status(app, a) == status(app, b) == ("SUCCEEDED", None)
    assert _keys(app, "GLST") == {"G3"}


@pytest.mark.parametrize("styp,bad", [
    ("DNLD", "<ABDG><DESC>no key</DESC></ABDG>"),
    ("DNLD", "<ABDG><ABCD>2</ABCD><NOPE>x</NOPE></ABDG>"),
    ("DNLD", abdg("2") + abdg("2")),
    ("UPD", "<ABDG><ABCD>1</ABCD><STND X='1'>1</STND></ABDG>"),
    ("DEL", "<ABDG><DESC>no key</DESC></ABDG>"),
])
def test_a_malformed_message_changes_nothing(app, styp, bad):
    """D17, INV-27: a record without its key, an unknown element/attribute or a duplicate key in a
    DNLD -> DEAD(malformed) naming it; the category's old rows and every other category are
    unchanged, even when the good records come first."""
    pump(app, _ref("ABDG", "DNLD", abdg("1"), abdg("2")), _ref("GLST", "DNLD", glst("G1")))
    before = _rows(app)
    (m,) = pump(app, _ref("ABDG", styp, abdg("9", "New"), bad))
    assert status(app, m) == ("DEAD", "malformed")
    (detail,) = query(app, "SELECT error_detail FROM proc_state WHERE msg_id = :m", m=m)[0]
    assert "ABDG" in detail
    assert _rows(app) == before


def test_a_failing_category_leaves_the_others_working(app):
    """INV-27: a broken GLST package stops only GLST; the ABDG messages around it apply."""
    a, bad, c = pump(app, _ref("ABDG", "DNLD", abdg("1")), _ref("GLST", "DNLD", glst("G1"), glst("G1")),
                     _ref("ABDG", "ADD", abdg("2")))
    assert [status(app, i) for i in (a, bad, c)] == [("SUCCEEDED", None), ("DEAD", "malformed"), ("SUCCEEDED", None)]
    assert _keys(app, "ABDG") == {"1", "2"} and _keys(app, "GLST") == set()


def test_resp_without_a_matching_request_writes_nothing(app, clock):
    """D16, US-08 AC5, C-23: no request of its type or only one not yet SENT -> SKIPPED(no_request);
    the last one already DONE -> SKIPPED(late_answer); one sent after the answer's DTTM ->
    SKIPPED(no_request); nothing written, the requests unchanged."""
    pump(app, _ref("ABDG", "DNLD", abdg("1")))
    sent = dttm_local("20210123053500")
    _clock_at(clock, sent + timedelta(seconds=2))
    other = _request(app, "GLST", sent)
    registered = _request(app, "ABDG", sent, "REGISTERED")
    (m0,) = pump(app, _ref("ABDG", "RESP", abdg("2")))
    done = _request(app, "ABDG", sent, "DONE")
    (m1,) = pump(app, _ref("ABDG", "RESP", abdg("2")))
    query_commit(app, "UPDATE req_track SET status = 'SENT', sent_at = :at WHERE req_id = :r",
                 at=sent + timedelta(seconds=1), r=registered)
    (m2,) = pump(app, _ref("ABDG", "RESP", abdg("2")))
    assert [status(app, m) for m in (m0, m1, m2)] == [
        ("SKIPPED", "no_request"), ("SKIPPED", "late_answer"), ("SKIPPED", "no_request")]
    assert "precedes request" in query(app, "SELECT error_detail FROM proc_state WHERE msg_id = :m", m=m2)[0][0]
    assert _keys(app, "ABDG") == {"1"}
    assert [_request_row(app, r)[0] for r in (other, done, registered)] == ["SENT", "DONE", "SENT"]


def test_resp_answers_its_request_once(app, clock):
    """D16, US-08 AC5: the matching RESP replaces the category and sets the RQRD DONE (answer
    id, done time) in one transaction; a second RESP finds its request closed and is skipped as a
    late answer."""
    pump(app, _ref("ABDG", "DNLD", abdg("1")))
    req = _request(app, "ABDG", dttm_local("20210123053500"))
    _clock_at(clock, dttm_local("20210123053500"))
    first, again = pump(app, _ref("ABDG", "RESP", abdg("2")), _ref("ABDG", "RESP", abdg("3")))
    assert status(app, first) == ("SUCCEEDED", None) and status(app, again) == ("SKIPPED", "late_answer")
    assert _request_row(app, req) == ("DONE", first, True)
    assert _keys(app, "ABDG") == {"2"}


def test_a_failure_after_the_delete_rolls_the_whole_category_back(app, monkeypatch, clock):
    """D17, INV-27, US-08 AC5: the replace, the upsert and the request completion are one
    transaction: when completing the request fails (here: it was closed under us), the category
    keeps its old rows, the request stays SENT and the message is retried (FAILED, INFRA)."""
    from msgx_engine.handlers.answers import RequestCompletion
    from msgx_engine.pipeline import plans
    from msgx_engine.store.ledger import LedgerConflict

    pump(app, _ref("ABDG", "DNLD", abdg("1"), abdg("2")))
    before = _rows(app)
    req = _request(app, "ABDG", dttm_local("20210123053500"))
    _clock_at(clock, dttm_local("20210123053500"))

    def closed_under_us(conn, plan, msg_id, now):
        raise LedgerConflict(f"request {plan.req_id} is no longer SENT", None, None)

    monkeypatch.setitem(plans.WRITERS, RequestCompletion, closed_under_us)
    (m,) = pump(app, _ref("ABDG", "RESP", abdg("3")))
    assert query(app, "SELECT status, error_class FROM proc_state WHERE msg_id = :m", m=m) == [("FAILED", "INFRA")]
    assert _rows(app) == before
    assert _request_row(app, req) == ("SENT", None, False)


def test_a_large_dnld_writes_with_one_statement_per_kind(app):
    """D17 (bulk): a 500-record DNLD over 500 old rows costs one DELETE and one bulk upsert on
    ref_master, not a round trip per record."""
    from sqlalchemy import event

    pump(app, _ref("GLST", "DNLD", *(glst(f"G{i}") for i in range(500))))
    seen: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        if "ref_master" in statement:
            seen.append(statement.split()[0].upper())

    event.listen(app.engine, "before_cursor_execute", record)
    try:
        (m,) = pump(app, _ref("GLST", "DNLD", *(glst(f"G{i}") for i in range(250, 750))))
    finally:
        event.remove(app.engine, "before_cursor_execute", record)
    assert status(app, m) == ("SUCCEEDED", None)
    assert sorted(seen) == ["DELETE", "INSERT"]
    assert _keys(app, "GLST") == {f"G{i}" for i in range(250, 750)}
