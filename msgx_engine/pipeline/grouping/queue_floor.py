"""Where the pump's head query starts reading the open messages (P40, queue floor).

The head query reads ``proc_state``'s partial index of open messages from its start. A message
that ends leaves a dead entry there, and only VACUUM removes it: with autovacuum off or behind, a
backlog of 300,000 messages left the query walking 800 pages of finished entries at its end, on
every group. The pump knows where the open messages begin: nothing below the head it last read is
open, except what was opened since. Its own intake opens rows (a late arrival, a gap's row), and it
lowers the floor as it registers them; an operator's replay or ``msgx recover`` opens rows from
another process, so the floor is dropped to 0 (a read from the index's start) at least every
``recheck_s``: a replayed message is picked up within that second instead of at the next group.
"""

from __future__ import annotations

import time
from collections.abc import Callable

RECHECK_S = 1.0


class QueueFloor:
    """The smallest mailbox id the head query needs to read from, kept by one pump."""

    def __init__(self, recheck_s: float = RECHECK_S, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.recheck_s = recheck_s
        self._monotonic = monotonic
        self._floor = 0
        self._read_whole_at = float("-inf")

    def start(self) -> int:
        """The id the next head query starts from: 0 when a whole read is due."""
        now = self._monotonic()
        if now - self._read_whole_at >= self.recheck_s:
            self._read_whole_at = now
            return 0
        return self._floor

    def saw(self, first_open: int | None) -> None:
        """The head query found ``first_open`` the smallest open id (None: none at or above its start)."""
        if first_open is not None:
            self._floor = first_open

    def lower(self, msg_id: int) -> None:
        """A row at ``msg_id`` was opened (registered) by this pump: the next read starts there at the latest."""
        self._floor = min(self._floor, msg_id)
