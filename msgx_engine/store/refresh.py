"""Refresh flights whose derived content changed, in the caller's transaction 1.

Some parts of a flight's whole state are derived from data outside the flight: the airbridges
serving its stands come from the ABDG reference data (D27, stand to airbridge). When that data changes, every flight
whose published whole state changes with it is rewritten like any other change (FS §5.5): its
``state_version`` advances, ``last_message_id`` names the message that caused it, and it gets a
``msg`` change event (the changed keys) and a ``schd`` whole-state event; the projection follows
from those events after the commit. Flights whose document does not change are left alone (no
version bump, no event: US-05 AC5).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime

from sqlalchemy import Connection

from msgx_engine.sis.decode import Meta
from msgx_engine.state.model import FlightState
from msgx_engine.state.serialize import document_changes
from msgx_engine.store import outbox
from msgx_engine.store.flights import FlightRepository
from msgx_engine.store.outbox import OutboxRow

Derive = Callable[[FlightState], FlightState]


def refresh_flights(conn: Connection, flids: Iterable[str], derive: Derive, *, msg_id: int, meta: Meta,
                    now: datetime) -> list[OutboxRow]:
    """Load ``flids`` (row-locked), re-derive each, write the ones whose document changed; their
    outbox rows. Constant number of statements whatever the number of flights."""
    repo = FlightRepository(conn)
    before = repo.load(flids, for_update=True)
    states: list[FlightState] = []
    events: list[OutboxRow] = []
    for flid in sorted(before):
        old = before[flid]
        new = derive(old)
        changed, cleared = document_changes(old, new)
        if not changed:
            continue
        new = replace(new, state_version=old.state_version + 1, last_message_id=msg_id)
        states.append(new)
        events += outbox.change_events(msg_id, meta, new, changed, cleared)
    repo.persist_next_states(states, now=now, previous=before)
    return events
