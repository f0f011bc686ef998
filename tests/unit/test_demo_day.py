"""The demo day generator (pure): what a demo day promises, checked without any server.

Whether the engine really gives each message its promised verdict is proved end to end in
tests/e2e/test_demo.py; here: determinism, size, coverage, and well-formedness.
"""

from __future__ import annotations

from collections import Counter
from datetime import date, datetime

import pytest
from lxml import etree

from msgx_engine.demo.day import DEFAULT_SEED, EXHAUSTED, MALFORMED, demo_day
from msgx_engine.sis.decode import SisRefused, decode

DAY = date(2026, 9, 9)


@pytest.fixture(scope="module")
def day():
    return demo_day(DAY)


def test_same_seed_same_messages_and_counts_on_any_day(day):
    """Deterministic: the same seed and date give the same bodies; another date gives the same
    counts and verdicts (only times and FLIDs move)."""
    again = demo_day(DAY)
    assert [m.body for m in again.messages] == [m.body for m in day.messages]
    other = demo_day(date(2027, 2, 28))
    assert other.kinds() == day.kinds()
    assert other.expected_outcomes() == day.expected_outcomes()
    assert len(other.flights) == len(day.flights) and set(other.flights).isdisjoint(day.flights)
    assert demo_day(DAY, DEFAULT_SEED + 1).messages != day.messages


def test_a_day_worth_looking_at(day):
    """At least 200 flights in today's snapshot, at least 1,000 FLOP messages over the common
    subtypes, several reference types, and the bad messages that make DEAD and SKIPPED show up."""
    kinds = day.kinds()
    assert day.snapshot_size >= 200 and len(day.flights) >= 200
    assert sum(n for k, n in kinds.items() if k.startswith("FLOP/")) >= 1000
    for styp in ("GTDT", "PSDT", "STND", "ESTT", "ACTT", "DELY", "CKDT", "CLDT", "CNCL", "FDIV", "MAFL", "FDEL"):
        assert kinds[f"FLOP/{styp}"] >= 1, styp
    for rtype in ("ABDG", "GLST", "SLST", "AIRL", "ARPT", "AIRC"):
        assert kinds[f"{rtype}/DNLD"] == 1, rtype
    assert kinds["SCHD/DNLD"] == 1
    outcomes = day.expected_outcomes()
    assert outcomes[MALFORMED] >= 3
    assert {("SKIPPED", "duplicate"), ("SKIPPED", "identity_conflict"), ("SKIPPED", "ignored:LDM-*"),
            ("SKIPPED", "unsupported")} <= set(outcomes)
    assert outcomes[("SUCCEEDED", None)] == len(day.messages) - sum(
        n for k, n in outcomes.items() if k[0] != "SUCCEEDED")


def test_the_snapshot_covers_the_given_day_with_a_code_share_pair(day):
    """D4: every FLTR's SODT falls on the demo day, so the DNLD is that day's snapshot; RECS counts
    the records (D5); one child carries MAID = a master in the package, whose MAFL names it."""
    (snap,) = [m for m in day.messages if m.kind == "SCHD/DNLD"]
    root = etree.fromstring(snap.body.encode())
    records = root.findall("SCHD/FLTR")
    assert int(root.findtext("SCHD/RECS")) == len(records) == day.snapshot_size
    assert {r.findtext("SODT")[:7] for r in records} == {"09SEP26"}
    flids = [r.findtext("FLID") for r in records]
    assert len(set(flids)) == len(flids)
    children = [r for r in records if r.find("MAID") is not None]
    assert len(children) == 1 and children[0].findtext("MAID") in flids
    (mafl,) = [m for m in day.messages if m.kind == "FLOP/MAFL"]
    assert children[0].findtext("FLID") in mafl.body and mafl.flid == children[0].findtext("MAID")


def test_every_message_decodes_except_the_deliberately_broken_one(day):
    """Bodies are well-formed SIS for the hardened decoder; only the truncated one is refused.
    Identities are unique except where a repeat is the point (duplicate, identity conflict)."""
    refused = []
    identities: Counter[str] = Counter()
    for m in day.messages:
        try:
            identities[decode(m.body).meta.identity] += 1
        except SisRefused as exc:
            refused.append((m.expect, exc.reason))
    assert refused == [(MALFORMED, "malformed")]
    repeats = sum(n - 1 for n in identities.values())
    assert repeats == sum(1 for m in day.messages if m.expect[1] in ("duplicate", "identity_conflict"))


def test_reference_data_matches_the_flights(day):
    """Reference packages are complete lists (RECS = records) and describe the airport the flights
    use: every stand of the day is in SLST, every near stand has an airbridge in ABDG."""
    packages = {m.kind.split("/")[0]: etree.fromstring(m.body.encode()) for m in day.messages
                if m.kind.endswith("/DNLD") and m.kind != "SCHD/DNLD"}
    for rtype, root in packages.items():
        assert int(root.findtext("RECS")) == len(root.findall(rtype)), rtype
    stands = {r.findtext("SCOD") for r in packages["SLST"].findall("SLST")}
    bridged = {s.text for r in packages["ABDG"].findall("ABDG") for s in r.findall("STND")}
    (snap,) = [m for m in day.messages if m.kind == "SCHD/DNLD"]
    used = {r.findtext("STND") for r in etree.fromstring(snap.body.encode()).findall("SCHD/FLTR")}
    assert used <= stands
    assert bridged and bridged <= stands and {s for s in used if s < "200"} <= bridged
    airlines = {r.findtext("ITOP") for r in packages["AIRL"].findall("AIRL")}
    assert {"CA", "3U", "UA", "CX"} <= airlines


NOW = datetime(2026, 9, 9, 13, 0)          # the demo started at 13:00, the airport's local time


@pytest.fixture(scope="module")
def afternoon():
    return demo_day(DAY, now=NOW)


def _actt(m) -> datetime | None:
    found = etree.fromstring(m.body.encode()).findtext("FLOP/ACTT")
    return datetime.strptime(found, "%d%b%y%H%M") if found else None


def test_actual_times_stop_at_the_time_the_demo_starts(day, afternoon):
    """A demo started at 13:00 shows a day in progress: every actual time (ACTT) is at or before
    13:00, the flights scheduled later have estimates but no actual, and the flights that have
    flown by then keep theirs (the same as on a day generated without a time)."""
    actuals = {m.flid: _actt(m) for m in afternoon.messages if m.kind == "FLOP/ACTT"}
    assert actuals and max(actuals.values()) <= NOW
    snap = etree.fromstring(next(m for m in afternoon.messages if m.kind == "SCHD/DNLD").body.encode())
    sodt = {r.findtext("FLID"): datetime.strptime(r.findtext("SODT"), "%d%b%y%H%M")
            for r in snap.findall("SCHD/FLTR")}
    later = {f for f, t in sodt.items() if t > NOW}
    assert later and not later & set(actuals)
    assert {m.flid for m in afternoon.messages if m.kind == "FLOP/ESTT"} & later      # estimates only
    whole_day = {m.flid: _actt(m) for m in day.messages if m.kind == "FLOP/ACTT"}
    assert {f for f, t in whole_day.items() if t <= NOW} == set(actuals)
    assert len(whole_day) > len(actuals)
    assert afternoon.expected_outcomes()[MALFORMED] == day.expected_outcomes()[MALFORMED]


def test_one_cancellation_is_the_failure_to_rehearse(day, afternoon):
    """The demo's rehearsed failure: exactly one message, a FLOP/CNCL of the flight DemoFault
    names, is promised DEAD(exhausted) (the verdict of a refused write once its retries are
    spent, which `msgx replay` accepts, US-10); no later message writes that flight, so its
    replay is never stale; its place does not depend on the time the demo starts."""
    for d in (day, afternoon):
        fault = d.fault
        assert fault is not None
        dead = [i for i, m in enumerate(d.messages) if m.expect == EXHAUSTED]
        assert dead == [fault.index]
        msg = d.messages[fault.index]
        assert msg.kind == "FLOP/CNCL" and msg.flid == fault.flid
        assert fault.flid in d.flights
        later = [m for m in d.messages[fault.index + 1:] if m.flid == fault.flid]
        assert all(m.expect[0] == "SKIPPED" for m in later), later
    assert day.fault.flid == afternoon.fault.flid


def test_the_demo_instance_turns_the_welcome_dialog_off():
    """The demo's Dagster instance disables the first-visit dialog (`nux`) and telemetry, beside
    the run limits and PostgreSQL storage it always had."""
    import yaml

    from msgx_engine.demo.instance import instance_yaml

    config = yaml.safe_load(instance_yaml("postgresql+psycopg2://postgres@/dagster?host=/tmp&port=5432"))
    assert config["nux"] == {"enabled": False}
    assert config["telemetry"] == {"enabled": False}
    assert "postgres" in config["storage"] and "run_coordinator" in config
