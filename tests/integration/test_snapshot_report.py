"""The reconciliation report of every daily snapshot through the real pump, stored with the run
(schd_gen_run.report) and shown by ``msgx snapshot-report`` (D1, D2, D3)."""

from __future__ import annotations

import re
from datetime import date

from builders import flop, next_seqn
from snapshot_builders import dnld, fltr, pump, status


def resent(package: str) -> str:
    """The same package under a fresh SEQN (six digits, F7), so it is a new message."""
    return re.sub(r"<SEQN>\d+</SEQN>", f"<SEQN>{next_seqn()}</SEQN>", package, count=1)


def test_every_snapshot_reports_its_drift_from_the_dynamic_state(app, msgx):
    """A DNLD for 9/9, then dynamic messages move A's stand and create X (fday NULL); the next DNLD
    of the day restores A, takes X over, adds N and drops B: its report says STND differs on 1
    flight (A: 777 -> 501), X compared, N added, B deleted. ``msgx snapshot-report`` shows the newest
    report, ``--day`` every report of that day, oldest first; another day has none."""
    (first,) = pump(app, dnld(fltr("A", stnd="501"), fltr("B", stnd="502")))
    pump(app, flop("STND", "A", "\t\t<STND>777</STND>\n"), flop("STND", "X", "\t\t<STND>600</STND>\n"))
    (second,) = pump(app, dnld(fltr("A", stnd="501"), fltr("X", stnd="600"), fltr("N", stnd="503")))
    assert status(app, second) == ("SUCCEEDED", None)

    code, (newest,) = msgx("snapshot-report")
    assert code == 0 and newest["msg_id"] == second
    assert (newest["fday"], newest["styp"], newest["flights"], newest["compared"], newest["differing"]) == (
        "2026-09-09", "DNLD", 3, 2, 2)
    assert newest["fields"]["STND"] == {"flights": 1, "examples": [{"FLID": "A", "old": "777", "new": "501"}]}
    assert (newest["added"], newest["added_examples"], newest["deleted"], newest["deleted_examples"]) == (
        1, ["N"], 1, ["B"])
    code, day = msgx("snapshot-report", "--day", "2026-09-09")
    assert code == 0 and [r["msg_id"] for r in day] == [first, second]
    assert (day[0]["added"], day[0]["compared"]) == (2, 0)
    assert msgx("snapshot-report", "--day", str(date(2026, 9, 10))) == (0, [])


def test_the_set_based_comparison_sees_every_kind_of_field(app, msgx):
    """The comparison in PostgreSQL covers collections (rows in order, ROUT and ERUT apart), exception
    objects, text groups and scalars, and finds nothing when the state already equals the package."""
    from builders import gtdt

    package = dnld(fltr("A", gates=2, routes=2), fltr("B", gates=1))
    pump(app, package)
    pump(app, resent(package))                                  # the same content again: no drift
    code, (same,) = msgx("snapshot-report")
    assert (same["compared"], same["differing"], same["fields"]) == (2, 0, {})
    pump(app, gtdt("A", (1, "Z9")),
         flop("FDIV", "B", '\t\t<FDIV DDES="PEK" DDIR="FROM">weather</FDIV>\n'),
         flop("SRVT", "B", '\t\t<SRVT><SRTC>J</SRTC><SRQT>2</SRQT></SRVT>\n'),
         flop("ERUT", "A", '\t\t<ERUT RTNO="1"><APCD>PEK</APCD></ERUT>\n'))
    pump(app, resent(package))
    code, (drift,) = msgx("snapshot-report")
    assert {k: v["flights"] for k, v in drift["fields"].items()} == {"ERUT": 1, "FDIV": 1, "GTDT": 1, "SRVT": 1}
    assert drift["fields"]["FDIV"]["examples"] == [
        {"FLID": "B", "old": {"DDES": "PEK", "DDIR": "FROM", "TEXT": "weather"}, "new": None}]
    assert drift["fields"]["ERUT"]["examples"][0]["old"] == [{"APCD": "PEK", "RTNO": "1"}]
    assert drift["differing"] == 2


def test_a_package_of_new_flights_skips_the_comparison_and_reports_them_added(app, msgx, monkeypatch):
    """When every flight a snapshot writes is new (state version 1), nothing was stored
    to compare, so the copies and the set-based comparison are skipped; the report is the one the
    comparison would give (all added, none compared or differing). A package that takes over a
    stored flight still compares."""
    from msgx_engine.store import reconcile

    calls: list[str] = []
    for name in ("keep_before", "differences"):
        real = getattr(reconcile, name)
        monkeypatch.setattr(reconcile, name, lambda *a, _real=real, _name=name: calls.append(_name) or _real(*a))
    (fresh,) = pump(app, dnld(fltr("A", stnd="501"), fltr("B", stnd="502"), fltr("C", stnd="503")))
    assert status(app, fresh) == ("SUCCEEDED", None) and calls == []
    _, (report,) = msgx("snapshot-report")
    assert (report["flights"], report["added"], report["compared"], report["differing"], report["fields"]) == (
        3, 3, 0, 0, {})
    (again,) = pump(app, resent(dnld(fltr("A", stnd="509"), fltr("B", stnd="502"), fltr("C", stnd="503"))))
    assert status(app, again) == ("SUCCEEDED", None) and calls == ["keep_before", "differences"]
    _, (report,) = msgx("snapshot-report")
    assert (report["compared"], report["differing"], report["fields"]["STND"]["flights"]) == (3, 1, 1)
