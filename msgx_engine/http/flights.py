"""``GET /all/flights`` (US-12, D11, flight list source): current flights from PostgreSQL in one consistent read; and
``GET /flights/{FLID}/history``: one flight's versions, oldest first (``store/history.py``).

One REPEATABLE READ, read-only transaction: the id list and every detail table are read from the
same snapshot, so a flight is never shown with gates from a later commit, and the read can never
write. The repository loads all flights in a constant number of statements (DESIGN §6).
"""

from __future__ import annotations

from sqlalchemy import Engine

from msgx_engine.state.serialize import dumps, state_document
from msgx_engine.store.flights import FlightRepository
from msgx_engine.store.history import flight_history


def current_flights_json(engine: Engine) -> str:
    """The JSON array of whole-state documents, ordered by FLID in code-point order (the same
    order as PostgreSQL's C collation, fixed here so the server's collation cannot change it)."""
    with engine.connect() as conn:
        conn.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
        with conn.begin():
            states = FlightRepository(conn).load_all_current()
    return dumps(sorted((state_document(s) for s in states), key=lambda d: d["FLID"]))


def flight_history_json(engine: Engine, flid: str, *, kafka_configured: bool, redis_configured: bool) -> str | None:
    """``{"flid": ..., "changes": [...]}`` as ``msgx history --json`` prints it; None when msgx has
    written no version of the flight."""
    with engine.connect() as conn:
        changes = flight_history(conn, flid)
    if not changes:
        return None
    return dumps({"flid": flid, "changes": [c.as_json(kafka_configured=kafka_configured,
                                                       redis_configured=redis_configured) for c in changes]})
