"""Derived fields a flight change moves: after a handler decides, keep every field msgx derives
from other flights true, in the same transaction 1 (DESIGN §2 step 6; the MAFL of D30, code-share cascade).

A derived field is computed from other stored facts rather than taken from a message: a
master's ``MAFL`` from its live children's ``MAID`` (D30, code-share cascade). A message that changes those facts
must refresh the flights that derive from them, in the transaction that changes them, so no
reader ever sees the two apart (INV-21/22). Each rule is a ``Refresh``:

- ``concerns`` (pure, cheap): whether the decision's changes can matter to the rule at all;
- ``wanted`` (pure): from the message's transitions (each written flight before and after), the
  keys whose inputs the rule must read (for MAFL: the masters the message touched);
- ``load``: reads those inputs under the writer lock (for MAFL: the live children of each);
- ``derive`` (pure): the further ``FlightChange``s, for flights the message writes (folded into
  their change) or others (``create=False``).

``refresh_derived`` loads, row-locked, the flights a decision's changes name that the route did not load
(the children an FDEL cascade deletes, the masters a rule refreshes), dropping the changes that
would leave a flight as it is (US-05 AC5), and runs every rule once in between. A rule reads
only when ``concerns`` and ``wanted`` say so, so a message that touches no derived field costs
nothing here. Add a rule by appending to ``REFRESHES``. (Derived content that follows reference
data, the airbridges of D27, stand to airbridge, is refreshed by the reference plan's writer instead:
``store.refresh.refresh_flights``.)
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Generic, TypeVar

from sqlalchemy import Connection

from msgx_engine.handlers import codeshare
from msgx_engine.handlers.changes import Transitions, effective, merge_changes, transitions
from msgx_engine.handlers.decision import APPLY, Decision, FlightChange
from msgx_engine.state.model import FlightState
from msgx_engine.store.flights import FlightRepository

R = TypeVar("R")

# Called before a statement that reads flights from the store, with a test naming the flights whose
# uncommitted held writes could change what it returns (None: any flight). The pump's write-behind
# writes what it holds when one of them matches (P13, write-behind); elsewhere it does nothing.
BeforeRead = Callable[[Callable[[FlightState], bool] | None], None]


def no_hold(concerns: Callable[[FlightState], bool] | None) -> None:
    return None


def _child_of(masters: frozenset[str], state: FlightState) -> bool:
    return state.get("MAID") in masters


@dataclass(frozen=True)
class Refresh(Generic[R]):
    """One derived-field rule: whether a decision can concern it at all (pure and cheap: no state
    is computed), what it needs (pure), how it reads it, and what it changes (pure)."""

    concerns: Callable[[Sequence[FlightChange], Mapping[str, FlightState]], bool]
    wanted: Callable[[Transitions], Collection[str]]
    load: Callable[[Connection, Collection[str]], R]
    derive: Callable[[Transitions, Mapping[str, FlightState], R], list[FlightChange]]


def _children(conn: Connection, masters: Collection[str]) -> codeshare.Children:
    return FlightRepository(conn).codeshare_children(masters)


def _nothing(conn: Connection, masters: Collection[str]) -> None:
    """A rule whose targets are loaded as the flights its changes name (``load_named``)."""
    return None


MAFL = Refresh(codeshare.may_touch_masters, codeshare.masters_to_derive, _children, codeshare.refresh_masters)  # D30
# decision C4, child changes reach the master: a code-share child's own change (gates, times, ...) updates and notifies
# its master
SHARED = Refresh(codeshare.may_notify_masters, codeshare.masters_to_notify, _nothing, codeshare.notify_masters)
REFRESHES: tuple[Refresh[Any], ...] = (MAFL, SHARED)


def refresh_derived(conn: Connection, decision: Decision, flights: Mapping[str, FlightState],
                    msg_id: int | None = None, before_read: BeforeRead = no_hold
                    ) -> tuple[Decision, Mapping[str, FlightState]]:
    """The decision with every derived field refreshed, and the loaded states it applies to. The
    rules see the message's changes as they will be written (last writer wins by ``msg_id``).
    ``before_read`` runs before any statement that reads the store (the pump's write-behind
    writes what it holds then, P13)."""
    if decision.outcome != APPLY or not decision.changes:
        return decision, flights
    decision, flights = load_named(conn, decision, flights, before_read)
    rules = [rule for rule in REFRESHES if rule.concerns(decision.changes, flights)]
    if not rules:
        return decision, flights
    moves = transitions(decision.changes, flights, msg_id)
    extra: list[FlightChange] = []
    for rule in rules:
        wanted = rule.wanted(moves)
        if wanted:
            before_read(partial(_child_of, frozenset(wanted)))     # the children the rule reads
            extra += rule.derive(moves, flights, rule.load(conn, wanted))
    extra = codeshare.own_record_wins(decision.changes, extra)     # decision C4
    if not extra:
        return decision, flights
    return load_named(conn, replace(decision, changes=merge_changes(decision.changes, extra)), flights, before_read)


def load_named(conn: Connection, decision: Decision, flights: Mapping[str, FlightState],
               before_read: BeforeRead = no_hold) -> tuple[Decision, Mapping[str, FlightState]]:
    """Load (row-locked) the existing flights ``decision``'s changes name that the route did not
    load (``create=False``: a change that may create its flight was looked up by the route
    already), and drop the changes to them that would change nothing (a refreshed master already
    right, deleted or missing)."""
    missing = {c.flid for c in decision.changes if not c.create} - set(flights)
    if not missing:
        return decision, flights
    before_read(lambda st: st.flid in missing)
    loaded = {**flights, **FlightRepository(conn).load(missing, for_update=True)}
    kept = tuple(c for c in decision.changes
                 if c.flid not in missing or effective(c, loaded.get(c.flid)) is not None)
    return replace(decision, changes=kept), loaded
