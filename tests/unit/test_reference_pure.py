"""Reference data, the pure half (D17, INV-26, INV-27, D16, US-08 AC4/AC5): record parsing, the
stored JSON shape, the checks that make a message DEAD(malformed), and the RESP request rule."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from builders import envelope

from msgx_engine.handlers.answers import OpenRequest, RequestCompletion
from msgx_engine.handlers.decision import APPLY, DEAD, SKIP
from msgx_engine.handlers.reference import BridgeRefresh, ReferenceContext, decide, record_shape
from msgx_engine.sis.decode import decode


def _decide(mtype: str, styp: str, body: str, request: OpenRequest | None = None, **kw):
    return decide(decode(envelope(mtype, styp, body, **kw)), ReferenceContext(request))


def _plan(mtype: str, styp: str, body: str, **kw):
    decision = _decide(mtype, styp, body, **kw)
    assert decision.outcome == APPLY, decision.detail
    first = decision.plans[0]
    return first.ref if isinstance(first, BridgeRefresh) else first


def test_an_abdg_message_also_refreshes_the_airbridges_d27():
    """D27: an ABDG write comes wrapped in a BridgeRefresh plan carrying its META (its writer sees the
    mapping before and after); other types get the plain RefPlan."""
    abdg = _decide("ABDG", "UPD", "<RECS>1</RECS><ABDG><ABCD>1</ABCD><STND>5</STND></ABDG>")
    assert [type(p).__name__ for p in abdg.plans] == ["BridgeRefresh"]
    assert abdg.plans[0].meta.type == "ABDG"
    assert abdg.plans[0].ref.rtype == "ABDG" and abdg.plans[0].ref.records[0][0] == "1"
    glst = _decide("GLST", "ADD", "<RECS>1</RECS><GLST><GCOD>1</GCOD></GLST>")
    assert [type(p).__name__ for p in glst.plans] == ["RefPlan"]


def test_every_reference_type_has_a_key_in_the_catalogue():
    """D17 / catalogue §5: the 23 types, each with its key element among its elements."""
    for rtype in ("ABDG", "ABNR", "AIRC", "AIRL", "ARPT", "BLST", "CHLT", "CITY", "CLST", "COUL", "DLYL", "FLTL",
                  "GLST", "HLTR", "ORGN", "PLST", "REGL", "REGN", "SLST", "STTS", "TLST", "VIPL", "VIPS"):
        shape = record_shape(rtype)
        assert shape is not None and shape.key in shape.elements, rtype
    assert (record_shape("ABDG").key, record_shape("AIRC").key, record_shape("REGN").key) == ("ABCD", "ITAT", "RNUM")


def test_record_json_keeps_repeated_elements_in_order_and_drops_empty_values():
    """INV-26: an empty element is "no current value" (absent from the JSON, the row stays);
    repeated STND/GATE are arrays in input order without their empty entries; keys sorted."""
    plan = _plan("ABDG", "ADD", "<RECS>1</RECS><ABDG><ABCD>213</ABCD><AHGT></AHGT><STND>613</STND><STND/>"
                                "<STND>213</STND><GATE></GATE><DESC> Bridge </DESC></ABDG>")
    assert plan.records == (("213", '{"ABCD":"213","DESC":"Bridge","STND":["613","213"]}'),)


def test_attributes_and_sub_elements_become_objects():
    """AIRL TRML@MVIN/@FLIN (text under TEXT), SUBC {CODE, NAME, NAMC}, ARPT ABBR@CODE; an entry
    whose attributes and text are all empty is dropped."""
    plan = _plan("AIRL", "ADD", '<RECS>1</RECS><AIRL><ITOP>CX</ITOP><TRML MVIN="" FLIN=""></TRML>'
                                '<TRML MVIN="A" FLIN="I">T3A</TRML><OGRP>ONE</OGRP><OGRP>TWO</OGRP>'
                                "<SUBC><CODE>001</CODE><NAME>First</NAME><NAMC></NAMC></SUBC></AIRL>")
    (key, text), = plan.records
    assert key == "CX"
    assert json.loads(text) == {"ITOP": "CX", "OGRP": ["ONE", "TWO"], "SUBC": [{"CODE": "001", "NAME": "First"}],
                                "TRML": [{"FLIN": "I", "MVIN": "A", "TEXT": "T3A"}]}
    arpt = _plan("ARPT", "ADD", '<RECS>1</RECS><ARPT><ITCD>SHA</ITCD><ABBR CODE="ABR1">HU</ABBR></ARPT>')
    assert json.loads(arpt.records[0][1])["ABBR"] == [{"CODE": "ABR1", "TEXT": "HU"}]


@pytest.mark.parametrize("mtype,styp,body,named", [
    ("ABDG", "DNLD", "<RECS>1</RECS><ABDG><DESC>no key</DESC></ABDG>", "no key element ABCD"),
    ("ABDG", "ADD", "<RECS>1</RECS><ABDG><ABCD></ABCD></ABDG>", "no key element ABCD"),
    ("ABDG", "UPD", "<RECS>1</RECS><ABDG><ABCD>1</ABCD><ITAT>x</ITAT></ABDG>", "ABDG/ITAT"),
    ("GLST", "DEL", "<RECS>1</RECS><GLST><GCOD>G1</GCOD><STND>1</STND></GLST>", "GLST/STND"),
    ("ABDG", "DNLD", "<RECS>2</RECS><ABDG><ABCD>1</ABCD></ABDG><ABDG><ABCD>1</ABCD></ABDG>", "ABCD='1'"),
    ("ABDG", "ADD", "<RECS>1</RECS><ABDG><ABCD>1</ABCD><DESC>a</DESC><DESC>b</DESC></ABDG>", "DESC appears 2"),
    ("ABDG", "ADD", '<RECS>1</RECS><ABDG><ABCD X="1">1</ABCD></ABDG>', "ABCD@X"),
    ("ARPT", "ADD", '<RECS>1</RECS><ARPT><ITCD>A</ITCD><ABBR CODE="1" LANG="x">A</ABBR></ARPT>', "ABBR@LANG"),
    ("AIRL", "ADD", "<RECS>1</RECS><AIRL><ITOP>A</ITOP><SUBC><CODE>1</CODE><X>2</X></SUBC></AIRL>", "SUBC/X"),
    ("ABDG", "ADD", "<RECS>1</RECS><ABDG><ABCD>1</ABCD><DESC><B>x</B></DESC></ABDG>", "DESC/B"),
    ("ABDG", "ADD", "<RECS>1</RECS><ABDG><ABCD>1</ABCD></ABDG><GLST><GCOD>1</GCOD></GLST>", "MSG/GLST"),
])
def test_malformed_records_are_dead_and_named(mtype, styp, body, named):
    """D17, INV-27: a record without its key, an element/attribute the catalogue does not know for
    the type, a repeated single value, or a duplicate key in a full package -> DEAD(malformed)
    naming it; no effect is built, so nothing is written."""
    decision = _decide(mtype, styp, body)
    assert (decision.outcome, decision.reason, decision.plans) == (DEAD, "malformed", ())
    assert named in decision.detail


def test_recs_mismatch_is_noted_not_rejected():
    """Catalogue §7: RECS is unreliable (AIRC/01 says 1 with 2 records); the plan carries a note for
    the log and keeps every record."""
    plan = _plan("AIRC", "DNLD", "<RECS>1</RECS><AIRC><ITAT>312</ITAT></AIRC><AIRC><ITAT>320</ITAT></AIRC>")
    assert [k for k, _ in plan.records] == ["312", "320"]
    assert "RECS is '1' but 2 AIRC record(s)" in plan.recs_note
    assert _plan("AIRC", "ADD", "<RECS>1</RECS><AIRC><ITAT>1</ITAT></AIRC>").recs_note is None
    assert "missing" in _plan("AIRC", "ADD", "<AIRC><ITAT>1</ITAT></AIRC>").recs_note


@pytest.mark.parametrize("styp,body,named", [
    ("DNLD", "<RECS>30</RECS>", "RECS 30 but carries 0"),
    ("RESP", "<RECS>3</RECS><ABDG><ABCD>1</ABCD></ABDG><ABDG><ABCD>2</ABCD></ABDG>", "RECS 3 but carries 2"),
    ("DNLD", "<ABDG><ABCD>1</ABCD></ABDG>", "RECS is missing"),
    ("DNLD", "", "RECS is missing"),
    ("DNLD", "<RECS>many</RECS><ABDG><ABCD>1</ABCD></ABDG>", "RECS is ['many']"),
])
def test_a_truncated_or_uncounted_full_package_is_refused(styp, body, named):
    """INV-27, US-14 AC3 (decision L4): a full package (DNLD/RESP) carrying fewer records than its
    RECS, or without a readable RECS, is DEAD(records_mismatch) with no plan: it would delete the
    records it lost. Incremental messages are not held to RECS."""
    decision = _decide("ABDG", styp, body, OpenRequest(7, None, SENT), dttm="20210123050000")
    assert (decision.outcome, decision.reason, decision.plans) == (DEAD, "records_mismatch", ())
    assert named in decision.detail and "nothing changed" in decision.detail
    assert _decide("ABDG", "UPD", "<RECS>3</RECS><ABDG><ABCD>1</ABCD></ABDG>").outcome == APPLY


def test_an_intended_clear_is_recs_zero_and_no_records():
    """D17, US-14 AC3 (decision L4): RECS 0 with no records is a complete, empty list: taken."""
    plan = _plan("ABDG", "DNLD", "<RECS>0</RECS>")
    assert (plan.replaces, plan.records) == (True, ())


def test_operations_per_subtype():
    """D17: DNLD/RESP replace (every record), ADD/UPD upsert (a key given twice keeps its last
    record), DEL deletes by key whatever else the record carries; an empty DNLD replaces with nothing."""
    upd = _plan("ABNR", "UPD", "<ABNR><ANRC>A</ANRC><ANRD>1</ANRD></ABNR><ABNR><ANRC>A</ANRC><ANRD>2</ANRD></ABNR>")
    assert (upd.replaces, upd.records) == (False, (("A", '{"ANRC":"A","ANRD":"2"}'),))
    dele = _plan("ABNR", "DEL", "<ABNR><ANRC>A</ANRC><ANRD>x</ANRD></ABNR><ABNR><ANRC>B</ANRC></ABNR>")
    assert (dele.keys, dele.records) == (("A", "B"), ())
    empty = _plan("ABNR", "DNLD", "<RECS>0</RECS>")
    assert (empty.replaces, empty.records) == (True, ())


def test_unknown_reference_subtype_is_unsupported():
    """D8: a reference type with a subtype D17 does not define is SKIPPED(unsupported), not DEAD."""
    decision = _decide("ABNR", "ZAP", "<ABNR><ANRC>A</ANRC></ABNR>")
    assert (decision.outcome, decision.reason) == (SKIP, "unsupported")


SENT = datetime(2021, 1, 22, 21, 0, tzinfo=UTC)       # 05:00 on 23 Jan 2021, Asia/Shanghai


@pytest.mark.parametrize("request_,dttm,why", [
    (None, "20210123053500", "no open (SENT) RQRD request for ABNR"),
    (OpenRequest(7, None, None), "20210123053500", "request 7 has no send time"),
    (OpenRequest(7, None, SENT), "20210123045959", "precedes request 7"),
])  # an unreadable DTTM never reaches a handler: the decoder refuses it (tests/unit/test_envelope.py)
def test_resp_without_a_matching_request_is_skipped(request_, dttm, why):
    """D16, US-08 AC4/AC5: a RESP is taken only for an open RQRD with a send time and a META DTTM
    (local time) not before it; otherwise SKIPPED(no_request), no effect."""
    decision = _decide("ABNR", "RESP", "<RECS>1</RECS><ABNR><ANRC>A</ANRC></ABNR>", request_, dttm=dttm)
    assert (decision.outcome, decision.reason, decision.plans) == (SKIP, "no_request", ())
    assert why in decision.detail


def test_resp_answering_its_request_carries_it_and_dnld_never_does():
    """D16: DTTM 05:00:00 local equals the send time -> taken, the plan names the request to
    complete; a DNLD given the same context does not complete it."""
    req = OpenRequest(7, None, SENT)
    body = "<RECS>1</RECS><ABNR><ANRC>A</ANRC></ABNR>"
    plan, completion = _decide("ABNR", "RESP", body, req, dttm="20210123050000").plans
    assert (plan.replaces, completion) == (True, RequestCompletion(7))
    dnld = _decide("ABNR", "DNLD", body, req, dttm="20210123050000")
    assert [type(p).__name__ for p in dnld.plans] == ["RefPlan"]
