"""A master leaves only with its code-share children (INV-21, US-05 AC5, C-25, decision L5): the
deletions msgx decides itself, a snapshot's diff delete and archiving's retire, never leave a
live child pointing at a deleted master. Real PostgreSQL and MariaDB mailbox."""

from __future__ import annotations

import logging
from datetime import timedelta

from snapshot_builders import dnld, fltr, schd, sodt

from msgx_engine.operations.archive import ArchivePolicy, Archiver
from msgx_engine.state.model import FlightState
from msgx_engine.store.flights import FlightRepository
from tests.pipeline_support import drain_now, proc

MASTER, CHILD, OTHER = "9001", "9002", "9003"


def child(flid: str, master: str, day: int = 9) -> str:
    return fltr(flid, sodt(day), flno=f"MU{flid}", extra=f"<MAID>{master}</MAID>")


def flights(app, *flids: str) -> dict[str, FlightState]:
    with app.engine.connect() as conn:
        return FlightRepository(conn).load(list(flids))


def mafl_flids(state: FlightState) -> list[str]:
    return [str(entry["FLID"]) for entry in state.entries("MAFL")]


def test_snapshot_that_drops_a_master_but_lists_its_child_keeps_both_with_an_alert(app, caplog):
    """INV-21, US-05 AC5, decision L5: the day's package leaves the master out but still lists its
    child: the master stays live (and a member of the day), its MAFL still lists the child, and
    the operator is alerted; the next package that drops both deletes both."""
    first = app.mailbox.put(dnld(fltr(MASTER, sodt(9)), child(CHILD, MASTER), fltr(OTHER, sodt(9))))
    drain_now(app)
    assert proc(app, first).status == "SUCCEEDED"
    assert mafl_flids(flights(app, MASTER)[MASTER]) == [CHILD]

    with caplog.at_level(logging.ERROR):
        dropped = app.mailbox.put(dnld(child(CHILD, MASTER), fltr(OTHER, sodt(9))))
        drain_now(app)
    assert proc(app, dropped).status == "SUCCEEDED"
    states = flights(app, MASTER, CHILD)
    assert not states[MASTER].deleted and not states[CHILD].deleted
    assert states[CHILD].get("MAID") == MASTER and mafl_flids(states[MASTER]) == [CHILD]
    alerts = [r.getMessage() for r in caplog.records if "ALERT" in r.getMessage()]
    assert any(f"master {MASTER} kept for {CHILD}" in a for a in alerts), alerts

    both = app.mailbox.put(dnld(fltr(OTHER, sodt(9))))
    drain_now(app)
    assert proc(app, both).status == "SUCCEEDED"
    states = flights(app, MASTER, CHILD, OTHER)
    assert states[MASTER].deleted and states[CHILD].deleted and not states[OTHER].deleted


def test_snapshot_that_drops_master_and_child_deletes_both(app):
    """C-25, INV-21: a master the package drops with its child goes with it (the cascade)."""
    app.mailbox.put(dnld(fltr(MASTER, sodt(9)), child(CHILD, MASTER), fltr(OTHER, sodt(9))))
    drain_now(app)
    gone = app.mailbox.put(dnld(fltr(OTHER, sodt(9))))
    drain_now(app)
    assert proc(app, gone).status == "SUCCEEDED"
    states = flights(app, MASTER, CHILD)
    assert states[MASTER].deleted and states[CHILD].deleted


def retire(app, clock) -> dict[str, int]:
    """Eight days later, an archiving run; its dry run must announce the same retirements."""
    clock.advance(timedelta(days=8).total_seconds())
    archiver, policy = Archiver(app.engine, clock), ArchivePolicy(older_than=timedelta(days=400))
    planned = archiver.run(policy, dry_run=True).counts.get("flight_schd retired", 0)
    counts = archiver.run(policy).counts
    assert counts.get("flight_schd retired", 0) == planned
    return counts


def test_retire_takes_an_idle_unowned_master_with_its_idle_unowned_children(app, clock):
    """INV-21, decision L5: archiving retires an idle unowned master together with its live
    children (each a tombstone), never the master alone."""
    created = app.mailbox.put(schd("ADFT", fltr(MASTER, sodt(9)), child(CHILD, MASTER)))
    drain_now(app)
    assert proc(app, created).status == "SUCCEEDED"
    assert retire(app, clock)["flight_schd retired"] == 2
    states = flights(app, MASTER, CHILD)
    assert states[MASTER].deleted and states[CHILD].deleted
    assert states[CHILD].state_version == states[MASTER].state_version == 2


def test_retire_keeps_an_idle_master_whose_child_a_day_owns(app, clock):
    """INV-21, decision L5: a master whose live child must stay (a day's snapshot owns it) is not
    retired; both stay live and the master's MAFL still lists the child."""
    app.mailbox.put(schd("ADFT", fltr(MASTER, sodt(9))))
    app.mailbox.put(dnld(child(CHILD, MASTER), fltr(OTHER, sodt(9))))
    drain_now(app)
    assert flights(app, CHILD)[CHILD].fday is not None
    assert retire(app, clock).get("flight_schd retired", 0) == 0
    states = flights(app, MASTER, CHILD)
    assert not states[MASTER].deleted and not states[CHILD].deleted
    assert mafl_flids(states[MASTER]) == [CHILD]


def test_retire_takes_an_idle_child_whose_master_is_gone(app, clock):
    """Decision L5: an idle unowned child whose master does not exist (no MAFL lists it) is retired
    on its own."""
    app.mailbox.put(schd("ADFT", child(CHILD, "9999")))
    drain_now(app)
    assert retire(app, clock)["flight_schd retired"] == 1
    assert flights(app, CHILD)[CHILD].deleted
