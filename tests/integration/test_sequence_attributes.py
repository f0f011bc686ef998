"""D25, US-03 AC2, FS §6: sequence attributes and group sizes, one rule for every message line.

The FLOP and ADFT faces are golden cases (tests/golden/GTDT/sequence_*, over_cap, ROUT/over_cap,
PSHT/sequence_repeated, ADFT/sequence_repeated); here the same rule on a daily snapshot's FLTR,
through the real pump (the pure rule per catalogue group: tests/unit/test_sequence_rule.py).
"""

from __future__ import annotations

import pytest
from builders import gtdt
from snapshot_builders import day_package, dnld, fltr, pump, sodt, status, whole_state


@pytest.mark.parametrize("extra", [
    '<GTDT GTNO="abc"><GATE>A</GATE></GTDT>',
    '<CKDT CKNO="1"><CHKC>1</CHKC></CKDT><CKDT CKNO="01"><CHKC>2</CHKC></CKDT>',
    '<PSDT PSNO="1000"><PSST>1</PSST></PSDT>',
    '<PSDT PSNO="-1"><PSST>1</PSST></PSDT>',
    '<PSDT><PSST>1</PSST></PSDT>',
    "".join(f'<ERUT RTNO="{n}"><APCD>A{n}</APCD></ERUT>' for n in range(1, 18)),
    "".join(f'<CLDT CLNO="{n}"><BELT>B{n}</BELT></CLDT>' for n in range(1, 66)),
], ids=["not_integer", "repeated", "above_999", "negative", "absent", "route_over_16", "belts_over_64"])
def test_d25_snapshot_fltr_with_bad_sequences_is_dead_and_writes_nothing(app, extra):
    """D25, US-03 AC2, INV-19: the snapshot line applies the same sequence rule as FLOP and ADFT:
    DEAD(malformed), nothing written (flights, ledger, members, events, details unchanged)."""
    pump(app, day_package(["A", "B"], 9), gtdt("B", (1, "K1")))
    before = whole_state(app)
    (m,) = pump(app, dnld(fltr("A", sodt(9)), fltr("B", sodt(9), extra=extra)))
    assert status(app, m) == ("DEAD", "malformed")
    assert whole_state(app) == before


def test_d25_route_of_16_points_and_64_gates_are_accepted(app):
    """D25: the caps are inclusive (16 route points, 64 entries of any other group)."""
    (m,) = pump(app, dnld(fltr("A", sodt(9), gates=64, routes=16)))
    assert status(app, m) == ("SUCCEEDED", None)
