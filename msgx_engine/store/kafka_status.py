"""The dispatcher's last send error and the broker it tried (``kafka_status``, migration 0020).

Kafka's own words about a failed send ("Connect to 127.0.0.1:9092 failed: Connection refused") were
only in the dispatching process's stderr, where an operator running ``msgx status`` on another host
never looks (decision M27, Kafka's own error). The dispatcher writes them here in the transaction that records the
failed attempt, and the time of its first delivery after them; ``msgx outbox``, the ``delivery_backlog``
check and its alert read the one row. A failing dispatcher writes once per send (at most one per
delivery timeout while the broker is away); a delivering one writes only its first delivery after
an error, so the steady state costs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert

from msgx_engine.store.tables import kafka_status

DISPATCHER = "dispatcher"      # the row's name: one dispatcher sends at a time (its advisory lock)


@dataclass(frozen=True)
class KafkaStatus:
    broker: str
    last_error: str | None
    error_at: datetime | None
    delivered_at: datetime | None      # the first delivery after ``error_at`` (None: none since)

    @property
    def failing(self) -> bool:
        """The last send ended in an error and nothing was delivered since."""
        return self.error_at is not None and (self.delivered_at is None or self.delivered_at < self.error_at)


def record_failure(conn: Connection, broker: str, error: str, at: datetime) -> None:
    values = {"broker": broker, "last_error": error[:2000], "error_at": at, "delivered_at": None}
    stmt = pg_insert(kafka_status).values(name=DISPATCHER, **values)
    conn.execute(stmt.on_conflict_do_update(index_elements=[kafka_status.c.name], set_=values))


def record_delivery(conn: Connection, at: datetime) -> None:
    """The first delivery after an error (the error stays, for the record)."""
    conn.execute(update(kafka_status).where(kafka_status.c.name == DISPATCHER, kafka_status.c.delivered_at.is_(None))
                 .values(delivered_at=at))


def read(conn: Connection) -> KafkaStatus | None:
    row = conn.execute(select(kafka_status.c.broker, kafka_status.c.last_error, kafka_status.c.error_at,
                              kafka_status.c.delivered_at).where(kafka_status.c.name == DISPATCHER)).first()
    return KafkaStatus(*row) if row is not None else None
