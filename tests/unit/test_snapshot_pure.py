"""Pure parts of the snapshot line: package checks, the day rule, full states and the plan.

No database: these are the handler's pure functions (DESIGN §1), exercised with decoded messages.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from snapshot_builders import dnld, fltr, sodt

from msgx_engine.handlers.answers import OpenRequest, RequestCompletion
from msgx_engine.handlers.decision import APPLY, DEAD, SKIP
from msgx_engine.handlers.snapshot import (
    Head,
    Ledger,
    PackageRejected,
    SnapshotContext,
    SnapshotInput,
    SnapshotPlan,
    _sodt_day,
    decide,
    outline,
    package_flights,
    plan_snapshot,
)
from msgx_engine.sis.decode import decode
from msgx_engine.sis.times import sis_date
from msgx_engine.state.model import FlightState, Replace, Set, apply, freeze_entry, full_state_commands

D9, D10 = date(2026, 9, 9), date(2026, 9, 10)


def test_sis_date_reads_ddmonyy_prefix():
    """D4/D19: the date part of DDMONYYHHMM and DDMONYY strings; anything else is unreadable."""
    assert sis_date("23JAN210535") == date(2021, 1, 23)
    assert sis_date("10SEP20") == date(2020, 9, 10)
    assert sis_date("09sep260800") == D9
    for bad in ("", "23JAN2", "32JAN21", "23XXX21", "AAJAN21", "29FEB21"):
        assert sis_date(bad) is None, bad


SODTS = ("23JAN210535", "23JAN210600", "23jan210535", "10SEP20", "23JAN2", "", "32JAN211200", "29FEB210000",
         "AAJAN210000", "09SEP260800", "09SEP26", "09SEP2", "??", "09SEP26XXXX")


def test_the_outline_reads_each_sodt_as_sis_date_does():
    """D4: the outline parses a SODT once per distinct DDMONYY (``_sodt_day``'s cache) and gets
    ``sis_date``'s date for every text, in any order, cached or not."""
    days: dict = {}
    for text in (*SODTS, *reversed(SODTS)):
        assert _sodt_day(text, days) == sis_date(text), text
        assert _sodt_day(text, {}) == sis_date(text), text


def test_the_outline_takes_the_first_flid_sodt_and_maid_of_a_record():
    """A repeated FLID, SODT or MAID element: the outline reads the first, as ``find`` does."""
    record = fltr("A", sodt(9)).replace("</FLTR>", f"<SODT>{sodt(10)}</SODT><FLID>B</FLID><MAID>M2</MAID></FLTR>")
    record = record.replace("<FLID>A</FLID>", "<FLID>A</FLID><MAID>M1</MAID>")
    pkg = outline(decode(dnld(record)))
    assert (pkg.flids, pkg.day, pkg.maids) == (("A",), D9, frozenset({"M1"}))


def test_day_is_the_majority_sodt_date_ties_to_the_earliest():
    """D4: DNLD covers the local date most SODT values fall on; a tie takes the earliest date."""
    three_to_two = dnld(*(fltr(f"A{i}", sodt(9)) for i in range(3)), *(fltr(f"B{i}", sodt(10)) for i in range(2)))
    assert outline(decode(three_to_two)).day == D9
    two_to_three = dnld(*(fltr(f"A{i}", sodt(9)) for i in range(2)), *(fltr(f"B{i}", sodt(10)) for i in range(3)))
    assert outline(decode(two_to_three)).day == D10
    tie = dnld(fltr("A", sodt(10)), fltr("B", sodt(9)))
    assert outline(decode(tie)).day == D9


def test_empty_package_has_no_day():
    """D4 (revised): an empty DNLD (RECS=0) has no day, whatever its META DTTM says."""
    pkg = outline(decode(dnld(dttm="20260910013000")))
    assert pkg.flids == () and pkg.day is None


def test_no_readable_sodt_leaves_the_day_open():
    """D4: without a readable SODT the day is unknown (the decision is then DEAD, see below)."""
    assert outline(decode(dnld(fltr("A", "??")))).day is None


@pytest.mark.parametrize("xml, reason, words", [
    (dnld(fltr("A"), fltr("B"), recs=3), "malformed", "RECS=3 but 2"),
    (dnld(fltr("A"), fltr("A")), "malformed", "FLID A appears more than once"),
    (dnld(fltr("A").replace("<FLID>A</FLID>", "<FLID> </FLID>")), "malformed", "FLTR #1 has no FLID"),
    (dnld(fltr("A")).replace("<RECS>1</RECS>", "<RECS>one</RECS>"), "malformed", "RECS"),
    (dnld(fltr("A")).replace("<RECS>1</RECS>", "<RECS>1</RECS><NOTE>x</NOTE>"), "malformed", "SCHD/NOTE"),
])
def test_package_checks(xml, reason, words):
    """INV-19, D5: RECS equals the FLTR count, FLIDs present and unique, nothing unknown in SCHD."""
    with pytest.raises(PackageRejected) as err:
        outline(decode(xml))
    assert err.value.reason == reason and words in err.value.detail


def test_oversize_package_is_refused_before_reading_records():
    """D5: more than 10,000 flights -> oversize."""
    records = "".join(f"<FLTR><FLID>F{i}</FLID></FLTR>" for i in range(10_001))
    with pytest.raises(PackageRejected) as err:
        outline(decode(dnld(records, recs=10_001)))
    assert err.value.reason == "oversize"


def test_full_state_equals_full_state_commands_on_the_sample(samples):
    """D1/C-26: a snapshot flight's state holds exactly the FLTR's fields; it equals applying
    ``full_state_commands`` to a state full of other values (every omitted field cleared)."""
    msg = decode((samples / "SCHD" / "01_DNLD.xml").read_bytes())
    busy = apply(FlightState.new("15"), [Set("CNCL", "Y"), Set("STND", "999"), Set("FLNO", "OLD"),
                                        Replace("GTDT", (freeze_entry({"GTNO": "1", "GATE": "A1"}),))],
                 message_id=1).state
    for _flid, fields in package_flights(msg):
        expected = apply(busy, full_state_commands(fields), message_id=2).state.fields
        assert dict(fields) == dict(expected)
        assert "CNCL" not in fields and "GTDT" not in fields
    assert dict(package_flights(msg))["15"]["PSDT"] == (freeze_entry({"PSNO": "1", "PSST": "504",
                                                                      "STST": "23JAN210237",
                                                                      "STET": "23JAN210549"}),)


def _input(flights, heads, members, day=D9, last=None):
    return SnapshotInput(styp="DNLD", day=day, flights=tuple((f, {"FLNO": f}) for f in flights),
                         ledger=Ledger(day, 1 if last else None, last, frozenset(members)),
                         heads={h.flid: h for h in heads}, request=None)


def test_plan_takes_over_earlier_and_unassigned_flights_and_leaves_later_ones():
    """D3: fday NULL or earlier than D -> written with fday D; later than D -> left, counted."""
    heads = [Head("OLD", date(2026, 9, 8), 4, False), Head("NUL", None, 2, False),
             Head("LATE", D10, 7, False), Head("GONE", D9, 3, True)]
    plan = plan_snapshot(_input(["OLD", "NUL", "LATE", "GONE", "NEW"], heads, []), msg_id=42)
    assert [(s.flid, s.fday, s.state_version, s.deleted, s.last_message_id) for s in plan.written] == [
        ("OLD", D9, 5, False, 42), ("NUL", D9, 3, False, 42), ("GONE", D9, 4, False, 42), ("NEW", D9, 1, False, 42)]
    assert plan.kept_later == ("LATE",)
    assert plan.members == {"OLD", "NUL", "LATE", "GONE", "NEW"}


def test_plan_diff_deletes_only_live_flights_still_owned_by_the_day():
    """FS §3.3 constraint 2: delete = (old - new) ∩ fday = D; other days, NULL, already deleted
    and purged flights are untouched."""
    heads = [Head("A", D9, 1, False), Head("B", D9, 1, False), Head("MOVED", D10, 2, False),
             Head("NUL", None, 1, False), Head("DEAD", D9, 2, True)]
    plan = plan_snapshot(_input(["A"], heads, ["A", "B", "MOVED", "NUL", "DEAD", "PURGED"]), msg_id=5)
    assert plan.deleted == ("B",)


def test_plan_keeps_the_stored_ffid():
    """FLTR has no FFID; the stored readable identity stays (same rule as ADFT)."""
    plan = plan_snapshot(_input(["A"], [Head("A", D9, 1, False, "YG-YG1-D-09SEP260800-D")], []), msg_id=5)
    assert plan.written[0].fields["FFID"] == "YG-YG1-D-09SEP260800-D"


def _context(xml, *, request=None, ledger=True, msg_id=42, last=None):
    msg = decode(xml)
    day_ledger = Ledger(D9, 1 if last else None, last, frozenset()) if ledger else None
    return msg, SnapshotContext(msg_id, outline(msg), request=request, ledger=day_ledger, heads={})


def test_decide_outcomes():
    """INV-19: a rejected outline is DEAD; D16: RESP without an open request, or answering
    before the request was sent, is SKIPPED(no_request); unknown FLTR content is DEAD(malformed);
    otherwise one plan carrying the whole package (and a RESP's request completion)."""
    msg = decode(dnld(fltr("A"), recs=2))
    with pytest.raises(PackageRejected) as err:
        outline(msg)
    dead = decide(msg, SnapshotContext(1, rejected=err.value))
    assert (dead.outcome, dead.reason) == (DEAD, "malformed")

    resp = dnld(fltr("A")).replace("<STYP>DNLD</STYP>", "<STYP>RESP</STYP>")
    assert decide(*_context(resp)).reason == "no_request"
    late = OpenRequest(7, D9, datetime(2026, 9, 8, 23, 0, tzinfo=UTC))   # 07:00 local on 9/9
    skipped = decide(*_context(resp.replace("20260908220000", "20260909065900"), request=late))
    assert (skipped.outcome, skipped.reason) == (SKIP, "no_request") and "precedes" in skipped.detail
    taken = decide(*_context(resp.replace("20260908220000", "20260909070100"), request=late))
    assert taken.outcome == APPLY and taken.plans[1] == RequestCompletion(7)
    assert isinstance(taken.plans[0], SnapshotPlan) and taken.plans[0].req_id == 7

    unknown = dnld(fltr("A", extra="<WHAT>1</WHAT>"))
    assert decide(*_context(unknown)).reason == "malformed"
    no_day = decide(*_context(dnld(fltr("A", "??")), ledger=False))
    assert (no_day.outcome, no_day.reason) == (DEAD, "malformed") and "SODT" in no_day.detail

    ok = decide(*_context(dnld(fltr("A"), fltr("B"))))
    assert ok.outcome == APPLY and len(ok.plans) == 1
    (plan,) = ok.plans
    assert isinstance(plan, SnapshotPlan) and [s.flid for s in plan.written] == ["A", "B"]
    assert {s.last_message_id for s in plan.written} == {42} and plan.flights == 2


def test_decide_plans_nothing_for_the_days_last_message():
    """FS §3.3 step 1 (replay short-circuit): the mailbox id is in the context, so the pure
    decider sees that this message already is the day's last one and plans no write."""
    replay = decide(*_context(dnld(fltr("A")), msg_id=42, last=42))
    assert replay.outcome == APPLY and replay.plans == () and replay.changes == ()
    fresh = decide(*_context(dnld(fltr("A")), msg_id=43, last=42))
    assert len(fresh.plans) == 1
