"""Every PostgreSQL lock msgx takes to keep one worker of a kind at a time, in one registry.

Session advisory locks (held for a worker's life on the connection it works with, see
``store.session_lock``): one key each, "msgx" in the high bytes so they cannot collide with
another application's keys on a shared server.

Transaction advisory locks (held until commit): a request registration locks its (TYPE, STYP)
so two concurrent registrations cannot both see "nothing open" (a row lock could not: there
may be no row yet).

Row lock: transaction 1 locks the writer row of ``pipeline_lock`` (taken by the queue head query,
also by the projection rebuild and drift check), so nothing else commits flight state meanwhile.
"""

from __future__ import annotations

from sqlalchemy import Connection, text

PUMP = 0x6D736778_0001               # the pump: the single active writer (OPS-1)
DISPATCHER = 0x6D736778_0002         # the Kafka dispatcher
REQUEST_SENDER = 0x6D736778_0005     # the request sender (COUTMSGS)

WRITER_ROW = "FLIGHT_SCHD_WRITER"    # pipeline_lock.name of the transaction-1 writer row


def request_registration_key(rtype: str, styp: str) -> str:
    """The text hashed into the transaction lock of one (TYPE, STYP) registration."""
    return f"msgx-request:{rtype}:{styp}"


def lock_request_registration(conn: Connection, rtype: str, styp: str) -> None:
    """Serialise registrations of one (TYPE, STYP) until the caller's transaction ends (D16, request lifecycle)."""
    conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:k))"), {"k": request_registration_key(rtype, styp)})


def lock_writer_row(conn: Connection) -> None:
    """Lock the transaction-1 writer row until the caller's transaction ends: no message's
    transaction 1 runs meanwhile (projection rebuild, drift check, operator actions)."""
    conn.execute(text("SELECT name FROM pipeline_lock WHERE name = :n FOR UPDATE"), {"n": WRITER_ROW})
