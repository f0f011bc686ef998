"""FDEL of a code-share master msgx never stored takes its stored children with it (INV-21, C-25;
decision C3). Real PostgreSQL and MariaDB mailbox, through the pump.

A child arrives first, naming a master ``M`` that is not stored (an ADFT record, a daily schedule,
a FLOP that creates it); then FLOP/FDEL of ``M``. Before, ``M`` became a silent tombstone and the
child stayed live, pointing at a deleted master, with no event for it.
"""

from __future__ import annotations

import json

import pytest
from builders import flop
from snapshot_builders import dnld, events, fltr, pump, query, schd, sodt, status

MASTER, CHILD = "9301", "9302"
LINK = f"<MAID>{MASTER}</MAID>"
CHILD_BY = {
    "adft": lambda: schd("ADFT", fltr(CHILD, extra=LINK)),
    "dnld": lambda: dnld(fltr(CHILD, sodt(9), extra=LINK)),
    "flop": lambda: flop("MAID", CHILD, f"\t\t{LINK}\n"),
}


@pytest.mark.parametrize("line", sorted(CHILD_BY))
def test_fdel_of_a_master_never_stored_deletes_its_stored_child(app, line):
    """INV-21, C-25, decision C3: the child stored by ``line`` is deleted with the master's FDEL, in
    its transaction, with its own ``msg`` deletion and ``schd`` tombstone; the master stays the
    silent tombstone it was (version 0, no event)."""
    (stored,) = pump(app, CHILD_BY[line]())
    assert status(app, stored) == ("SUCCEEDED", None)
    ((version,),) = query(app, "SELECT state_version FROM flight_schd WHERE flid = :f AND NOT deleted", f=CHILD)
    (fdel,) = pump(app, flop("FDEL", MASTER, "\t\t<FDEL></FDEL>\n"))
    assert status(app, fdel) == ("SUCCEEDED", None)
    assert query(app, "SELECT flid, deleted, state_version FROM flight_schd ORDER BY flid") == [
        (MASTER, True, 0), (CHILD, True, version + 1)]
    assert events(app, fdel) == [(CHILD, "msg", "change", version + 1), (CHILD, "schd", "tombstone", version + 1)]
    ((payload,),) = query(app, "SELECT payload FROM msg_event WHERE msg_id = :m AND topic = 'msg'", m=fdel)
    assert json.loads(payload)["DELETED"] is True
