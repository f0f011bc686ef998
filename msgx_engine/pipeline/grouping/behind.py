"""Write-behind for a group (docs/decisions.md P13): a group's flight states, outbox
events and terminal statuses written once per group instead of once per message.

Inside a group (P10, group commit) every message's writes go to the same transaction, which commits whole or
not at all, so when in that transaction they reach PostgreSQL changes nothing a reader or a crash
can see, as long as nothing in the transaction reads them before they are there. So a message
that applies its state without plans (FLOP increments, FDEL, ADFT) hands its writes to
``WriteBehind`` instead of sending them, and the read-ahead (P11) keeps the states it wrote as
the flights' current states for the messages after it. Everything held is written (``write``)
before any statement that could read it: the group's commit, a head query, a route that loads
from the store, a derived-field read (D30, code-share cascade), a message with plans, a rollback's redo. Then:

- one upsert of the group's flights (each flight's last state) with its detail rows rewritten
  against what the store held before the group (``persist_next_states``'s ``previous``);
- one insert of every event, in message order (event ids follow it), released at once when the
  statuses held are terminal (P25, events released at write: they commit together);
- one guarded statement for every terminal status, history row, backfill todo, event release and
  identity binding (``queue.write_applied``). Any refusal there (an identity already bound, the
  writer lock lost) rolls the group back, and P10 redoes it one message at a time, where each is
  classified as before.

A group of two-transaction messages (P12, grouped two-transaction messages, with the Redis projection) is held the same
way (P16, two-transaction write-behind, ``terminal=False``): its third statement is transaction 1's ``applied_at`` and
identity binding of every message (``queue.mark_applied_many``); their terminal statuses follow in transaction 2,
after the post-commit steps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import Connection

from msgx_engine.db import pipelined
from msgx_engine.pipeline.writer import LockLost
from msgx_engine.state.model import FlightState
from msgx_engine.store import outbox, queue
from msgx_engine.store.flights import FlightRepository, collections_of
from msgx_engine.store.outbox import OutboxRow


@dataclass
class WriteBehind:
    """The writes of the group's messages not sent yet; ``terminal``: their held status rows are
    terminal (folded transactions, P13), else transaction 1's applied marks (P16)."""

    terminal: bool = True
    states: dict[str, FlightState] = field(default_factory=dict)          # each flight's last state
    before: dict[str, FlightState | None] = field(default_factory=dict)  # ... and its stored state (None: no row)
    detail_versions: dict[str, int] = field(default_factory=dict)        # ... the version that last moved its details
    events: list[OutboxRow] = field(default_factory=list)
    applied: list[queue.Applied] = field(default_factory=list)
    msg_ids: set[int] = field(default_factory=set)

    @property
    def holding(self) -> bool:
        return bool(self.msg_ids)

    def hold(self, msg_id: int, states: Sequence[FlightState], loaded: Mapping[str, FlightState],
             events: Sequence[OutboxRow]) -> None:
        """A message's flight states (``loaded``: the states it applied to) and its events."""
        self.msg_ids.add(msg_id)
        for state in states:
            if state.flid not in self.states:
                self.before[state.flid] = loaded.get(state.flid)
            if collections_of(state) != collections_of(self.states.get(state.flid) or loaded.get(state.flid)):
                self.detail_versions[state.flid] = state.state_version   # as a write of its own would stamp them
            self.states[state.flid] = state
        self.events.extend(events)

    def concerns(self, test: Callable[[FlightState], bool] | None) -> bool:
        """Whether what is held could change a read: a held flight, as it is held or as the store
        has it, passes ``test`` (None: anything held)."""
        if test is None:
            return self.holding
        return any(test(st) for st in self.states.values()) or any(
            st is not None and test(st) for st in self.before.values())

    def hold_status(self, row: queue.Applied) -> None:
        """A held message's status row: terminal, or its applied mark (``terminal``)."""
        self.applied.append(row)

    def write(self, conn: Connection, *, now: datetime, pid: int, window: timedelta) -> None:
        """Send everything held, in three round trips; raises what the store refused (the caller
        rolls back), ``LockLost`` when a status row was refused."""
        if not self.holding:
            return
        states, before, versions = list(self.states.values()), self.before, self.detail_versions
        events, applied = self.events, self.applied
        self.clear()
        # a flight whose details moved and came back within the group is rewritten all the same, as
        # its messages alone would have left it (their version on the rows)
        back = {st.flid for st in states
                if st.flid in versions and collections_of(st) == collections_of(before[st.flid])}
        with pipelined(conn):
            FlightRepository(conn).persist_next_states(
                states, now=now, previous={f: st for f, st in before.items() if st is not None and f not in back},
                detail_versions=versions, unstored={f for f, st in before.items() if st is None})
            # held terminal statuses commit with their events: written released (P25)
            outbox.insert(conn, events, released_at=now if self.terminal else None)
        write = queue.write_applied if self.terminal else queue.mark_applied_many
        if applied and not write(conn, applied, now=now, pid=pid, window=window):
            raise LockLost("a grouped status write was refused: a row is not open or this session lost the writer lock")

    def clear(self) -> None:
        self.states, self.before, self.detail_versions = {}, {}, {}
        self.events, self.applied, self.msg_ids = [], [], set()
