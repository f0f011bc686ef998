"""Two small holes of the last spec corners, through the real pump (PostgreSQL and the MariaDB
mailbox): a clear marker that carries a value, and a daily snapshot resent with the same content."""

from __future__ import annotations

import re

from builders import flop, gtdt, next_seqn
from pipeline_support import gates
from snapshot_builders import dnld, events, flights, fltr, ledger, pump, query, status


def resent(package: str) -> str:
    """The same package under a fresh SEQN, so it is a new message, not a replay."""
    return re.sub(r"<SEQN>\d+</SEQN>", f"<SEQN>{next_seqn()}</SEQN>", package, count=1)


def test_a_zero_sequence_carrying_a_gate_is_refused_not_a_clear(app):
    """D7, L10, FS §5.2: ``GTNO="0"`` is the clear marker only as a bare element; with a GATE it is
    a contradiction: DEAD(malformed) naming it, the flight's gates and version unchanged, no event."""
    (first,) = pump(app, gtdt("F1", (1, "B7")))
    version = flights(app)["F1"][2]
    (m,) = pump(app, flop("GTDT", "F1", '\t\t<GTDT GTNO="0"><GATE>A1</GATE></GTDT>\n'))
    assert status(app, m) == ("DEAD", "malformed")
    (detail,) = query(app, "SELECT error_detail FROM proc_state WHERE msg_id = :m", m=m)
    assert "GTNO=0" in detail[0] and "GATE" in detail[0]
    assert gates(app, "F1") == [(1, "B7")]
    assert flights(app)["F1"][2] == version
    assert events(app, m) == []
    # the bare marker still clears (D7)
    (clear,) = pump(app, gtdt("F1", (0,)))
    assert status(app, clear) == ("SUCCEEDED", None)
    assert gates(app, "F1") == []
    assert first < m < clear


def test_an_equal_snapshot_under_a_new_seqn_changes_no_version_and_emits_nothing(app):
    """US-06 AC5, L11: the same day's package again under a new SEQN: the day's ledger advances (it
    is the day's newest snapshot), but no flight's version, last message or content changes and no
    ``msg``/``schd`` event is written. A package differing in one flight re-versions only that one."""
    package = dnld(fltr("A", gates=2, routes=1), fltr("B", desks=2))
    (first,) = pump(app, package)
    before = flights(app)
    rows = query(app, "SELECT flid, state_version, last_message_id FROM flight_schd ORDER BY flid")
    (again,) = pump(app, resent(package))
    assert status(app, again) == ("SUCCEEDED", None)
    assert ledger(app)[before["A"][0]] == (2, again)
    assert flights(app) == before
    assert query(app, "SELECT flid, state_version, last_message_id FROM flight_schd ORDER BY flid") == rows
    assert events(app, again) == []
    assert gates(app, "A") == [(1, "G1A"), (2, "G2A")]

    (changed,) = pump(app, dnld(fltr("A", gates=2, routes=1), fltr("B", desks=2, stnd="777")))
    assert status(app, changed) == ("SUCCEEDED", None)
    assert flights(app)["A"] == before["A"] and flights(app)["B"][2] == before["B"][2] + 1
    assert events(app, changed) == [("B", "schd", "state", before["B"][2] + 1)]
    assert first < again < changed
