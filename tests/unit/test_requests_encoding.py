"""Outbound request encoding (catalogue §6, Q25, D16; US-08 AC1): every RQFD/RQRD body decodes
with the hardened parser and has the peer's META and body shapes."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from msgx_engine.sis import requests as sis
from msgx_engine.sis.catalogue import REFERENCE_TYPES
from msgx_engine.sis.decode import decode
from msgx_engine.sis.times import dttm, sis_date, sis_time

NOW = datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)      # 08:00:05 airport local time


def test_rqfd_has_the_catalogue_shape_and_decodes():
    """Catalogue §6: SNDR VIEW, 6-digit SEQN, local DTTM, TYPE RQFD STYP NONE, STDB/STDE DDMONYYHHMM."""
    xml = sis.encode("RQFD", "NONE", 42, NOW, start_text="23JAN210000", end_text="23JAN212359")
    msg = decode(xml)
    assert (msg.meta.sndr, msg.meta.seqn, msg.meta.dttm, msg.meta.type, msg.meta.styp) == (
        "VIEW", "000042", "20260101080005", "RQFD", "NONE")
    assert msg.kind == "RQFD"
    body = msg.root.find("RQFD")
    assert [(c.tag, c.text) for c in body] == [("STDB", "23JAN210000"), ("STDE", "23JAN212359")]


@pytest.mark.parametrize(("start", "end", "tags"), [("23JAN210000", None, ["STDB"]), (None, "23JAN212359", ["STDE"])])
def test_rqfd_may_omit_one_bound_but_not_both(start, end, tags):
    """Catalogue §6: either bound may be omitted, not both."""
    msg = decode(sis.encode("RQFD", "NONE", 1, NOW, start_text=start, end_text=end))
    assert [c.tag for c in msg.root.find("RQFD")] == tags
    with pytest.raises(sis.RequestInvalid):
        sis.encode("RQFD", "NONE", 1, NOW)


@pytest.mark.parametrize("rtype", sis.RQRD_TYPES)
def test_rqrd_for_each_reference_type(rtype):
    """US-08 AC1, catalogue §6: RQRD STYP = RTYP = the requested type, for all 23 peer types."""
    msg = decode(sis.encode("RQRD", rtype, 999_999, NOW))
    assert (msg.meta.sndr, msg.meta.seqn, msg.meta.type, msg.meta.styp, msg.kind) == (
        "VIEW", "999999", "RQRD", rtype, "RQRD")
    assert [(c.tag, c.text) for c in msg.root.find("RQRD")] == [("RTYP", rtype)]


def test_rqrd_types_are_the_23_reference_types_and_others_are_refused():
    assert len(sis.RQRD_TYPES) == 23 and frozenset(sis.RQRD_TYPES) == REFERENCE_TYPES
    assert sis.check_rtype(" glst ") == "GLST"
    for bad in ("SCHD", "RQFD", "XXXX", ""):
        with pytest.raises(sis.RequestInvalid):
            sis.encode("RQRD", bad, 1, NOW)
    with pytest.raises(sis.RequestInvalid):
        sis.encode("RQFD", "GLST", 1, NOW, start_text="23JAN210000")
    with pytest.raises(sis.RequestInvalid):
        sis.encode("EROR", "NONE", 1, NOW)


@pytest.mark.parametrize("seqn", [0, 1_000_000, -1])
def test_seqn_is_six_digits(seqn):
    with pytest.raises(sis.RequestInvalid):
        sis.seqn_text(seqn)


def test_times_are_local_and_round_trip_through_the_snapshot_parser():
    """Catalogue §2: DDMONYYHHMM local time; an aware UTC value is converted to Asia/Shanghai, a
    naive one is already local; the requested day is the start's local date (D4/D16)."""
    assert sis_time(datetime(2021, 1, 23, 5, 35)) == "23JAN210535"
    assert sis_time(datetime(2021, 1, 22, 21, 35, tzinfo=UTC)) == "23JAN210535"
    assert sis_date(sis_time(datetime(2026, 12, 31, 23, 59))) == date(2026, 12, 31)
    assert dttm(datetime(2026, 1, 1, 16, 30, 1, tzinfo=UTC)) == "20260102003001"
    assert sis.rqfd_day(datetime(2026, 9, 9, 0, 0), datetime(2026, 9, 9, 23, 59)) == date(2026, 9, 9)
    assert sis.rqfd_day(None, datetime(2026, 9, 10, 6, 0)) == date(2026, 9, 10)
    with pytest.raises(sis.RequestInvalid):
        sis.rqfd_day(None, None)


@pytest.mark.parametrize(("start", "end", "why"), [
    (datetime(2026, 9, 9, 12, 0), datetime(2026, 9, 10, 6, 0), "more than one day"),
    (datetime(2026, 9, 9, 18, 0), datetime(2026, 9, 9, 12, 0), "later than"),
    (datetime(1999, 12, 31, 8, 0), None, "2000-2099"),
    (None, datetime(2100, 1, 1, 8, 0), "2000-2099"),
    (datetime(2026, 9, 8, 16, 30, tzinfo=UTC), datetime(2026, 9, 9, 1, 0), None),   # 9/9 00:30 local: one day
])
def test_d23_rqfd_window_is_one_day_in_the_sis_years(start, end, why):
    """D23: one RQFD per day (a window spanning days is refused at registration); SIS writes
    two-digit years, so only 2000-2099 can be sent and read back."""
    if why is None:
        assert sis.rqfd_day(start, end) == date(2026, 9, 9)
        return
    with pytest.raises(sis.RequestInvalid, match=why):
        sis.rqfd_day(start, end)


def test_a_sent_request_is_read_back_from_its_body():
    """Decision L16: what a COUTMSGS row says of the request it carries (SEQN, DTTM as the send
    time, window and day, reference type) is what was encoded; a body msgx could not have written
    is not a request."""
    at = datetime(2026, 9, 8, 14, 0, 5, tzinfo=UTC)
    fd = sis.read_sent(7, sis.encode("RQFD", "NONE", 42, at, start_text="09SEP260800", end_text="09SEP261200"))
    assert fd == sis.SentRequest(7, "RQFD", "NONE", "000042", at, date(2026, 9, 9), "09SEP260800", "09SEP261200")
    rd = sis.read_sent(8, sis.encode("RQRD", "GLST", 43, at))
    assert (rd.rtype, rd.styp, rd.seqn, rd.sent_at, rd.fday) == ("RQRD", "GLST", "000043", at, None)
    body = sis.encode("RQFD", "NONE", 44, at, start_text="09SEP260800")
    assert sis.read_sent(9, body.replace("<STDB>09SEP260800</STDB>", "<STDB>garbage</STDB>")) is None
    assert sis.read_sent(10, body.replace("20260908", "2026ab08")) is None
    assert sis.read_sent(11, "<MSG>not closed") is None
