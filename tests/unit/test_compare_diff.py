"""The comparison of ``msgx compare``, pure: classification, known-difference rules with their hits,
the scope of days, the fields not compared, and the refusal of a bad known-differences file."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from msgx_engine.compare import report
from msgx_engine.compare.diff import EXPLAINED, Scope, compare
from msgx_engine.compare.rules import DIFFERS, MISSING_HERE, MISSING_THERE, RulesError, load_rules, parse_rules

REPO = Path(__file__).resolve().parents[2]


def doc(flid: str, version: int = 1, fday: str = "2026-12-05", **fields) -> dict:
    return {"FLID": flid, "STATE_VERSION": version, "FDAY": fday, **fields}


def test_each_class_is_found_with_both_values():
    here = {"1": doc("1", FLNO="CA1", GTDT=[{"GATE": "A1"}]), "2": doc("2"), "4": doc("4", FLNO="CA4")}
    there = {"1": doc("1", FLNO="CA9", GTDT=[{"GATE": "A1"}], REMK="x"), "3": doc("3"), "4": doc("4", FLNO="CA4")}
    result = compare(here, there)
    found = {(d.flid, d.field, d.cls, str(d.here), str(d.there)) for d in result.differences}
    assert found == {("1", "FLNO", DIFFERS, "CA1", "CA9"), ("1", "REMK", DIFFERS, "None", "x"),
                     ("2", "*", MISSING_THERE, str(here["2"]), "None"),
                     ("3", "*", MISSING_HERE, "None", str(there["3"]))}
    assert (result.compared, result.equal, result.unexplained) == (4, 1, 4)


def test_state_version_is_not_compared_by_default():
    result = compare({"1": doc("1", version=7)}, {"1": doc("1", version=2)})
    assert result.differences == [] and result.equal == 1
    with_version = compare({"1": doc("1", version=7)}, {"1": doc("1", version=2)}, ignored=())
    assert [(d.field, d.here, d.there) for d in with_version.differences] == [("STATE_VERSION", 7, 2)]


def test_rules_explain_count_hits_and_list_the_unused():
    rules = parse_rules({"rules": [
        {"field": "REMK", "when": {"here": "absent", "there": "present", "flight": {"ADID": "A"}},
         "reason": "the old system keeps remarks of arrivals"},
        {"field": "*", "when": {"class": "missing_here", "flids": ["3"]}, "reason": "answer to a request"},
        {"field": "GTDT", "reason": "never happens"},
    ]})
    here = {"1": doc("1", ADID="A"), "2": doc("2", ADID="D")}
    there = {"1": doc("1", ADID="A", REMK="r"), "2": doc("2", ADID="D", REMK="r"), "3": doc("3")}
    result = compare(here, there, rules=rules)
    classes = {(d.flid, d.field): d.cls for d in result.differences}
    assert classes == {("1", "REMK"): EXPLAINED, ("2", "REMK"): DIFFERS, ("3", "*"): EXPLAINED}
    assert result.rule_hits == {1: 1, 2: 1, 3: 0}
    assert [r.number for r in result.unused_rules] == [3]
    out = report.as_json(result, here="h", there="t")
    assert out["rules"][0]["hits"] == 1 and out["unused_rules"] == [
        {"rule": 3, "field": "GTDT", "reason": "never happens"}]
    assert out["differences"]["by_class"] == {MISSING_HERE: 0, MISSING_THERE: 0, DIFFERS: 1, EXPLAINED: 2}
    assert out["fields"]["REMK"] == {"total": 2, "unexplained": 1, "classes": {EXPLAINED: 1, DIFFERS: 1},
                                     "examples": ["1", "2"]}
    assert out["verdict"] == "fail"
    text = report.as_markdown(out)
    assert "FAIL: 1 unexplained difference(s) in 1 flight(s)" in text and "| 3 | `GTDT` | 0 |" in text


def test_scope_live_days_and_one_day():
    here = {"old": doc("old", fday="2026-12-01", FLNO="A"), "now": doc("now", FLNO="B"),
            "moved": doc("moved", fday="2026-12-05"), "noday": {"FLID": "noday", "FLNO": "X"}}
    there = {"old": doc("old", fday="2026-12-01", FLNO="Z"), "now": doc("now", FLNO="C"),
             "moved": doc("moved", fday="2026-11-30"), "noday": {"FLID": "noday", "FLNO": "Y"}}
    live = compare(here, there, scope=Scope(since=date(2026, 12, 4)))
    assert {(d.flid, d.field) for d in live.differences} == {("now", "FLNO"), ("moved", "FDAY"), ("noday", "FLNO")}
    one = compare(here, there, scope=Scope(day=date(2026, 12, 1)))
    assert {(d.flid, d.field) for d in one.differences} == {("old", "FLNO")}


@pytest.mark.parametrize(("data", "message"), [
    ({"rules": [{"field": "FLNO"}]}, "rule 1: reason is missing"),
    ({"rules": [{"field": "FLNO", "reason": "r", "when": {"klass": "differs"}}]}, "rule 1: unknown condition(s) klass"),
    ({"rules": [{"field": "A", "reason": "r"}, {"field": "FLNO", "reason": "r", "when": {"class": "missing_here"}}]},
     "rule 2: a flight missing on one side is field *"),
    ({"rules": [{"field": "FLNO", "reason": "r", "extra": 1}]}, "rule 1: unknown key(s) extra"),
    ({"rulez": []}, "expected a mapping with one key, rules"),
])
def test_a_bad_file_or_rule_is_refused_saying_where(data, message):
    with pytest.raises(RulesError) as err:
        parse_rules(data)
    assert message in str(err.value)


def test_the_shipped_known_differences_file_parses(tmp_path):
    rules = load_rules(REPO / "deploy" / "compare" / "known-differences.yml")
    assert rules and all(r.reason for r in rules)
    bad = tmp_path / "bad.yml"
    bad.write_text("rules: [field: x\n", encoding="utf-8")
    with pytest.raises(RulesError, match="not valid YAML"):
        load_rules(bad)
