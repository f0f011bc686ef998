"""A tombstone that holds a hidden detail row is restored like any deleted flight (FS §5.4, INV-29;
decision C2). Real PostgreSQL and MariaDB mailbox, through the pump, one commit per message and
grouped (P10, P13).

FDEL of a FLID msgx never stored leaves a silent tombstone (version 0, decision L3); a FLOP for it
is a hidden write (a ``flight_gate`` row under the tombstone, F6). The restore that follows is the
flight's version 1, which the writer took for "no stored row": it skipped the detail DELETE (the
ADFT's gate insert then hit its key) and, with 500 flights or more, COPYed the main rows straight
into ``flight_schd`` (a new day's snapshot listing the tombstone died whole).
"""

from __future__ import annotations

import pytest
from builders import flop, gtdt
from snapshot_builders import dnld, fltr, query, schd, sodt, status

from tests.pipeline_support import drain_now, gates

PATHS = pytest.mark.parametrize("group", [1, 64], ids=["one-message", "grouped"])


def drain(app, group: int, *xmls: str) -> list[int]:
    """Put the messages and drain them, ``group`` messages per commit at most."""
    ids = [app.mailbox.put(x) for x in xmls]
    drain_now(app, group_messages=group)
    return ids


def tombstone_with_a_hidden_gate(app, group: int, flid: str) -> None:
    """FDEL of a flight never stored, then a gate for it: deleted, version 0, one gate row."""
    (fdel,) = drain(app, group, flop("FDEL", flid, "\t\t<FDEL></FDEL>\n"))
    (hidden,) = drain(app, group, gtdt(flid, (1, "H9")))
    assert status(app, fdel) == status(app, hidden) == ("SUCCEEDED", None)
    assert query(app, "SELECT deleted, state_version FROM flight_schd WHERE flid = :f", f=flid) == [(True, 0)]
    assert gates(app, flid) == [(1, "H9")]


@PATHS
def test_adft_restores_a_tombstone_that_holds_a_hidden_gate(app, group):
    """INV-29, FS §5.4, decision C2: the ADFT restores the flight (version 1, live) and its gates
    replace the hidden one (before: DEAD(exhausted) on the gate's key, the flight stayed deleted)."""
    tombstone_with_a_hidden_gate(app, group, "X1")
    (adft,) = drain(app, group, schd("ADFT", fltr("X1", gates=1)))
    assert status(app, adft) == ("SUCCEEDED", None)
    assert query(app, "SELECT deleted, state_version, last_message_id FROM flight_schd WHERE flid = 'X1'") == [
        (False, 1, adft)]
    assert gates(app, "X1") == [(1, "G1X1")]


@PATHS
def test_a_new_days_snapshot_of_500_flights_restores_a_tombstone_that_holds_a_hidden_gate(app, group):
    """INV-29, S3, FS §5.4, decision C2: the first snapshot of a day with 500 never-stored flights
    that lists the tombstone restores it with the package's gate and writes the 500 (before: COPY
    into ``flight_schd`` hit the tombstone's key and the whole package died)."""
    tombstone_with_a_hidden_gate(app, group, "X1")
    package = dnld(fltr("X1", sodt(9), gates=1), *(fltr(f"N{i:04d}", sodt(9)) for i in range(500)))
    (snap,) = drain(app, group, package)
    assert status(app, snap) == ("SUCCEEDED", None)
    assert query(app, "SELECT deleted, state_version, fday IS NOT NULL FROM flight_schd WHERE flid = 'X1'") == [
        (False, 1, True)]
    assert gates(app, "X1") == [(1, "G1X1")]
    assert query(app, "SELECT count(*) FROM flight_schd WHERE NOT deleted AND state_version = 1") == [(501,)]
