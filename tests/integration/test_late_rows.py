"""Last writer wins by mailbox id through the real pipeline (docs/decisions.md F6, US-01 AC5, FS §5.3):
a row that commits late with a smaller id, after the head passed its gap, never rewinds what a
larger id already wrote, still applies what nobody newer touched, and leaves the flight as the
in-order run would. The pure rule and its property test: tests/unit/test_lww_properties.py.

Rows with explicit ids model inserts that commit out of order; the ManualClock expires the gap grace.
"""

from __future__ import annotations

from builders import envelope, flop, gtdt
from snapshot_builders import dnld, fltr, sodt
from sqlalchemy import text

from msgx_engine.mailbox.tables import cminmsgs
from tests.pipeline_support import drain_now, events, gates, proc


def _put_at(app, msg_id: int, body: str) -> None:
    with app.mailbox.engine.connect() as conn:
        conn.execute(cminmsgs.insert().values(CMINMSGS_ID=msg_id, CMINMSGS_CLOB_MSG=body, CMINMSGS_STATUS="VALID"))


def _late(app, clock, first: dict[int, str], late: dict[int, str]) -> None:
    """Process ``first`` (the head passes the gaps after their grace), then the ``late`` rows."""
    for msg_id, body in first.items():
        _put_at(app, msg_id, body)
    drain_now(app)
    clock.advance(10)
    drain_now(app)
    for msg_id, body in late.items():
        _put_at(app, msg_id, body)
    clock.advance(1)
    drain_now(app)


def _flight(app, flid: str) -> dict:
    with app.engine.connect() as conn:
        row = conn.execute(text("SELECT state_version, stnd, deleted, field_msg FROM flight_schd WHERE flid = :f"),
                           {"f": flid}).one()
    return dict(row._mapping)


def _adft(flid: str, extra: str) -> str:
    """A SCHD-ADFT record (an increment, D21) with the mandatory fields and ``extra``."""
    return envelope("SCHD", "ADFT", f"<SCHD><FLTR><FLID>{flid}</FLID><ALCD>YG</ALCD><FLNO>YG9001</FLNO>"
                                    f"<MVIN>D</MVIN><SODT>{sodt(9)}</SODT><FLTY>W</FLTY><FLIN>D</FLIN>"
                                    f"<ACFT>733</ACFT>{extra}</FLTR></SCHD>\n")


def _stnd(n: str) -> str:
    return f"\t\t<STND>{n}</STND>\n"


def test_late_smaller_id_does_not_rewind_newer_gates_but_applies_the_rest(app, clock):
    """The issue's case: row 122 (newer gate) processed first; row 121 (an ADFT with an older gate,
    a stand and the flight's identity fields) commits late: the gate stays 122's, the rest is
    applied, and the late row's events announce only what it changed."""
    _late(app, clock, {120: gtdt("LR1", (1, "A")), 122: gtdt("LR1", (1, "NEW"))},
          {121: _adft("LR1", '<STND>S121</STND><GTDT GTNO="1"><GATE>OLD</GATE></GTDT>')})
    assert proc(app, 121).late_arrival and proc(app, 121).status == "SUCCEEDED"
    assert gates(app, "LR1") == [(1, "NEW")]
    flight = _flight(app, "LR1")
    assert flight["stnd"] == "S121" and flight["field_msg"]["GTDT"] == 122 and flight["field_msg"]["STND"] == 121
    change = [e for e in events(app, 121) if e.topic == "msg"]
    assert len(change) == 1 and "S121" in change[0].payload and "OLD" not in change[0].payload


def test_equal_value_resend_still_wins_over_a_late_older_value(app, clock):
    """A, then B committing late, then A re-sent: in id order the gate ends A. The re-send (id 3)
    changes nothing a reader sees (no version, no event) but is stamped, so the late B (id 2) is
    refused and the flight converges to the in-order state."""
    _late(app, clock, {1: gtdt("LR2", (1, "A")), 3: gtdt("LR2", (1, "A"))}, {2: gtdt("LR2", (1, "B"))})
    assert gates(app, "LR2") == [(1, "A")]
    assert events(app, 3) == [] and events(app, 2) == []
    flight = _flight(app, "LR2")
    assert flight["state_version"] == 1 and flight["field_msg"]["GTDT"] == 3


def test_a_late_creating_message_older_than_a_deletion_stays_deleted(app, clock):
    """FDEL (id 2) arrives before the FLOP that creates the flight (id 1, late): the deletion left a
    silent tombstone (no event), and the late FLOP only writes the hidden fields: the flight stays
    deleted, as in id order, and nobody was told about it."""
    _late(app, clock, {2: flop("FDEL", "LR3", "\t\t<FDEL/>\n")}, {1: flop("STND", "LR3", _stnd("S1"))})
    flight = _flight(app, "LR3")
    assert flight["deleted"] and flight["stnd"] == "S1" and flight["state_version"] == 0
    assert events(app, 1) == [] and events(app, 2) == []


def test_a_late_deletion_never_removes_a_flight_a_newer_message_restored(app, clock):
    """Created (1) and rewritten by an ADFT (3, which also restores: it writes the deletion flag);
    the FDEL between them (2) commits late: in id order 3 restored what 2 deleted, so 2 is stale:
    the flight stays live and no tombstone is sent (INV-29)."""
    _late(app, clock, {1: flop("STND", "LR4", _stnd("S1")), 3: _adft("LR4", "<STND>S3</STND>")},
          {2: flop("FDEL", "LR4", "\t\t<FDEL/>\n")})
    flight = _flight(app, "LR4")
    assert not flight["deleted"] and flight["stnd"] == "S3"
    assert events(app, 2) == []


def test_a_late_snapshot_keeps_newer_dynamic_values_and_an_older_one_is_superseded(app, clock):
    """A day's snapshot (id 2) committed after a dynamic update (id 3) of one of its flights: the
    snapshot writes its whole state but the stand id 3 set stays (last writer wins per key). A
    second snapshot of the same day older than the one applied (id 4, late, vs id 5) is
    SKIPPED(superseded): it would rewind the whole day."""
    day = 9
    _late(app, clock, {1: dnld(fltr("LR5", sodt(day), stnd="S1"), fltr("LR6", sodt(day), stnd="S1")),
                       3: flop("STND", "LR5", _stnd("S3"))},
          {2: dnld(fltr("LR5", sodt(day), stnd="S2"), fltr("LR6", sodt(day), stnd="S2"))})
    assert proc(app, 2).status == "SUCCEEDED"
    assert _flight(app, "LR5")["stnd"] == "S3" and _flight(app, "LR6")["stnd"] == "S2"
    _late(app, clock, {5: dnld(fltr("LR5", sodt(day), stnd="S5"), fltr("LR6", sodt(day), stnd="S5"))},
          {4: dnld(fltr("LR5", sodt(day), stnd="S4"))})
    assert (proc(app, 4).status, proc(app, 4).reason) == ("SKIPPED", "superseded")
    assert _flight(app, "LR5")["stnd"] == "S5" and not _flight(app, "LR6")["deleted"]
