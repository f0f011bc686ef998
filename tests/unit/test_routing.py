"""Routing and plans without a database (DESIGN §2 step 6, D8, INV-30): the route table picks the
most specific route, a route loads its typed context once and calls its pure decider once, an
unknown kind is SKIPPED(unsupported), the plan registry hands each plan to its writer, and the
decision's flight changes become states and outbox events purely."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from builders import envelope, flop, state

from msgx_engine.handlers.adft import DayMembers
from msgx_engine.handlers.answers import RequestCompletion
from msgx_engine.handlers.decision import APPLY, SKIP, Decision, FlightChange, Plan
from msgx_engine.handlers.eror import RequestFailure
from msgx_engine.handlers.reference import BridgeRefresh, RefPlan
from msgx_engine.handlers.seasons import SeasonPlan
from msgx_engine.handlers.snapshot import SnapshotPlan
from msgx_engine.pipeline import plans, routing
from msgx_engine.pipeline.transitions import next_states
from msgx_engine.sis.decode import decode
from msgx_engine.state.model import Set
from msgx_engine.store.outbox import TOPIC_MSG, TOPIC_SCHD


def test_the_most_specific_route_wins():
    """(TYPE, STYP) before (TYPE, *) before (kind, *): FDEL has its own route, other FLOP subtypes share one."""
    fdel = decode(flop("FDEL", "A", "\t\t<FDEL/>\n"))
    stnd = decode(flop("STND", "A", "\t\t<STND>101</STND>\n"))
    assert routing.route_for(fdel).load is routing.load_fdel
    assert routing.route_for(stnd) is routing.ROUTES[("FLOP", "*")]
    assert routing.route_for(decode(envelope("ZZZZ", "NONE", "<ZZZZ/>\n"))) is None


def test_unknown_kind_is_skipped_without_loading_anything():
    """D8, INV-30: an unknown TYPE/STYP never blocks the head; nothing is read (no connection used)."""
    routed = routing.decide(None, decode(envelope("ZZZZ", "NONE", "<ZZZZ/>\n")), 7)  # type: ignore[arg-type]
    assert (routed.decision.outcome, routed.decision.reason) == (SKIP, "unsupported")


def test_a_route_loads_its_typed_context_once_and_decides_once(monkeypatch):
    """The loader receives the mailbox id; the decider gets exactly what the loader returned."""

    @dataclass(frozen=True)
    class Ctx:
        msg_id: int

    seen: list[object] = []

    def load(conn, msg, msg_id):
        seen.append(("load", msg_id))
        return Ctx(msg_id)

    def decide(msg, ctx):
        seen.append(("decide", ctx))
        return Decision.apply(FlightChange("F1", (Set("STND", "101"),)))

    monkeypatch.setitem(routing.ROUTES, ("FAKE", "*"), routing.Route(load, decide, lambda ctx: {"F1": state("F1")}))
    routed = routing.decide(object(), decode(envelope("FAKE", "NONE", "<FAKE/>\n")), 42)  # type: ignore[arg-type]
    assert seen == [("load", 42), ("decide", Ctx(42))]
    assert routed.decision.outcome == APPLY and set(routed.flights) == {"F1"}


def test_every_plan_kind_has_a_writer_and_an_unknown_plan_is_refused():
    """The typed registry covers every plan the handlers make; a plan nobody writes is an error."""
    assert {SnapshotPlan, RefPlan, BridgeRefresh, SeasonPlan, RequestCompletion, RequestFailure,
            DayMembers} == set(plans.WRITERS)

    class Stray(Plan):
        pass

    with pytest.raises(TypeError, match="no store writer"):
        plans.write_plans(None, [Stray()], 1, None)  # type: ignore[arg-type]


def test_flight_changes_become_states_and_two_events_each():
    """FS §5.5: per changed flight, a msg change event and a schd whole-state event; a change for a
    missing flight that may not create it is dropped; a delete becomes a tombstone event; deleting a
    flight never seen leaves a silent tombstone row (F6: no version, no event, not projected)."""
    msg = decode(flop("STND", "A", "\t\t<STND>101</STND>\n"))
    decision = Decision.apply(FlightChange("A", (Set("STND", "101"),)),
                              FlightChange("GONE", (), create=False, delete=True),
                              FlightChange("NONE", (Set("STND", "1"),), create=False),
                              FlightChange("B", (), create=False, delete=True))
    routed = routing.Routed(decision, {"B": state("B", STND="7")})
    states, events, shown = next_states(routed, 9, msg.meta)
    assert [(s.flid, s.state_version, s.deleted) for s in states] == [("A", 1, False), ("GONE", 0, True),
                                                                      ("B", 3, True)]
    assert [s.flid for s in shown] == ["A", "B"] and states[1].stamp("DELETED") == 9
    assert [(e.flid, e.topic, e.kind) for e in events] == [
        ("A", TOPIC_MSG, "change"), ("A", TOPIC_SCHD, "state"), ("B", TOPIC_MSG, "change"),
        ("B", TOPIC_SCHD, "tombstone")]
    assert {e.msg_id for e in events} == {9}
