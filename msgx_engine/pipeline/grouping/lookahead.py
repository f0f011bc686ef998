"""Read ahead for a group (docs/decisions.md P11, read-ahead): the group's next heads and the states
of their flights, each read once per transaction instead of once per message.

A group (P10, group commit) keeps one transaction open over consecutive messages, under the writer row lock
its first head query took; nothing else writes the queue or the flights while it is held. So:

- the head query asks for the next ``size`` open messages at once; while the transaction stays
  open, each next head is the next of them, exactly as a head query would have returned it then
  (the pump is the only writer of ``proc_state``, and the group's finished messages are the ones
  taken off the front);
- when a head's flights are not read yet, the flights of it and of the read-ahead heads after it
  whose route needs only flight states (FLOP increments, ADFT) are loaded in one statement,
  row-locked, with the decoded messages kept for their turn. A flight a message writes is
  dropped from what was read (the next message reads it again from the store); a message that
  writes plans (which may write any flight) drops it all.

Heads and states belong to one transaction: at its commit or rollback they are dropped
(``reset``), and they are only used while that same transaction is still the connection's
(``valid``), so a commit made anywhere cannot leave stale heads or states behind. A decoded
message depends on its body alone, so it is kept until its turn (at most ``4 * size`` of them).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from sqlalchemy import Connection

from msgx_engine.sis.decode import SisMessage
from msgx_engine.state.model import FlightState
from msgx_engine.store.flights import FlightRepository
from msgx_engine.store.queue import QueueHead

DEFAULT_SIZE = 64


@dataclass
class Lookahead:
    """What one transaction of a group has read ahead: heads, decoded messages, flight states."""

    size: int = DEFAULT_SIZE
    heads: deque[QueueHead] = field(default_factory=deque)
    decoded: dict[int, SisMessage] = field(default_factory=dict)
    flights: dict[str, FlightState | None] = field(default_factory=dict)     # None: not stored
    _txn: object | None = None

    def valid(self, conn: Connection) -> bool:
        """What was read ahead is still this transaction's (else it is dropped)."""
        if self._txn is not None and conn.get_transaction() is not self._txn:
            self.reset()
        return self._txn is not None

    def reset(self) -> None:
        self.heads.clear()
        self.flights.clear()
        self._txn = None
        if len(self.decoded) > 4 * self.size:
            self.decoded.clear()

    def _bind(self, conn: Connection) -> None:
        if self._txn is None:
            self._txn = conn.get_transaction()

    def take_head(self, conn: Connection) -> QueueHead | None:
        """The next head read ahead in this transaction, if any."""
        return self.heads.popleft() if self.valid(conn) and self.heads else None

    def keep_heads(self, conn: Connection, later: Iterable[QueueHead]) -> None:
        """The heads after the one being processed, as the head query read them."""
        self._bind(conn)
        self.heads = deque(later)

    def take_decoded(self, msg_id: int) -> SisMessage | None:
        return self.decoded.pop(msg_id, None)

    def states_for(self, conn: Connection, msg: SisMessage,
                   flids_of: Callable[[SisMessage], list[str] | None],
                   decode_ahead: Callable[[int], SisMessage | None]) -> Mapping[str, FlightState | None] | None:
        """The read-ahead states covering ``msg``'s flights, loading (row-locked, one statement)
        its flights and those of the read-ahead heads when they are not there yet. None when the
        message's route loads more than flight states."""
        wanted = flids_of(msg)
        if wanted is None:
            return None
        self.valid(conn)
        if all(f in self.flights for f in wanted):
            return self.flights
        flids = set(wanted)
        for head in self.heads:
            later = self.decoded.get(head.msg_id) or decode_ahead(head.msg_id)
            if later is None:
                continue
            self.decoded[head.msg_id] = later
            flids.update(flids_of(later) or ())
        flids -= set(self.flights)
        self._bind(conn)
        loaded = FlightRepository(conn).load(flids, for_update=True)
        self.flights.update({f: loaded.get(f) for f in flids})
        return self.flights

    def wrote(self, conn: Connection, states: Iterable[FlightState]) -> None:
        """A message's states held by the write-behind (P13): the current states for the next
        messages of this transaction."""
        self._bind(conn)
        self.flights.update({st.flid: st for st in states})

    def written(self, flids: Iterable[str], *, plans: bool) -> None:
        """A message wrote these flights (or plans, which may write any): read them again."""
        if plans:
            self.flights.clear()
            return
        for flid in flids:
            self.flights.pop(flid, None)
