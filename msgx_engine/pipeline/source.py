"""Message bodies for the queue head, read from the mailbox ahead of need (DESIGN §2 step 3).

One mailbox round trip fetches the bodies of the next open messages at once (not one per
message), and the bodies stay in memory until their message is terminal, so an already
registered message can still be processed while MySQL is unreachable (US-09: processing never
waits for the mailbox). Large bodies (snapshots) are not prefetched; they are read when they
reach the head, so memory stays bounded.
"""

from __future__ import annotations

from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError

from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.store import registration


class SourceUnavailable(RuntimeError):
    """The mailbox could not be read. Not the message's fault: the head waits, no attempt is used."""


class BodySource:
    def __init__(self, mailbox: Mailbox, *, prefetch: int = 200, small_bytes: int = 256 * 1024) -> None:
        self.mailbox = mailbox
        self.prefetch = prefetch
        self.small_bytes = small_bytes
        self._bodies: dict[int, str | None] = {}      # None: the row does not exist in the mailbox

    def body(self, conn: Connection, msg_id: int) -> str | None:
        """The head's body, or None when the mailbox row is gone. Raises SourceUnavailable."""
        if msg_id not in self._bodies:
            self._fill(conn, msg_id)
        return self._bodies.get(msg_id)

    def cached(self, msg_id: int) -> str | None:
        """The body if it was read ahead already (never reads the mailbox)."""
        return self._bodies.get(msg_id)

    def forget(self, msg_id: int) -> None:
        self._bodies.pop(msg_id, None)

    def _fill(self, conn: Connection, head_id: int) -> None:
        ahead = registration.open_ids_after(conn, head_id, self.prefetch - 1)
        wanted = [head_id] + [i for i in ahead if i not in self._bodies]
        try:
            rows = self.mailbox.bodies(wanted, max_bytes=self.small_bytes)
            if head_id in rows and rows[head_id] is None:
                rows[head_id] = self.mailbox.body(head_id)
        except SQLAlchemyError as exc:
            raise SourceUnavailable(f"mailbox unreachable: {type(exc).__name__}: {exc}"[:500]) from exc
        if len(self._bodies) > 4 * self.prefetch:
            self._bodies.clear()
        for i in wanted:
            if i not in rows:
                if i == head_id:
                    self._bodies[i] = None
            elif rows[i] is not None:
                self._bodies[i] = rows[i]
