"""Helpers for the pipeline tests : drive the pump and read back every record it writes."""

from __future__ import annotations

import hashlib

from sqlalchemy import func, select, text

from msgx_engine.pipeline.pump import PumpOptions
from msgx_engine.store.tables import (
    backfill_todo,
    detail_tables,
    flight_schd,
    msg_event,
    proc_state,
    proc_state_hst,
)

flight_gate = detail_tables["flight_gate"]


def drain_now(app, **options):
    """Process everything processable at the ManualClock's current time, then stop (``options``:
    more ``PumpOptions``, e.g. ``group_messages=1`` for one commit per message)."""
    return app.pump(PumpOptions(exit_when_waiting=True, idle_poll_s=0.01, **options)).run()


def proc(app, msg_id):
    with app.engine.connect() as conn:
        return conn.execute(select(proc_state).where(proc_state.c.msg_id == msg_id)).one()


def history(app, msg_id):
    with app.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(
            select(proc_state_hst.c.status, proc_state_hst.c.reason, proc_state_hst.c.error_class,
                   proc_state_hst.c.attempt).where(proc_state_hst.c.msg_id == msg_id).order_by(proc_state_hst.c.id))]


def events(app, msg_id):
    with app.engine.connect() as conn:
        return conn.execute(select(msg_event).where(msg_event.c.msg_id == msg_id)
                            .order_by(msg_event.c.event_id)).fetchall()


def todo(app, msg_id):
    with app.engine.connect() as conn:
        return conn.execute(select(backfill_todo).where(backfill_todo.c.msg_id == msg_id)).first()


def gates(app, flid):
    with app.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(
            select(flight_gate.c.ordinal, flight_gate.c.gate).where(flight_gate.c.flid == flid)
            .order_by(flight_gate.c.ordinal))]


def flight_count(app) -> int:
    with app.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(flight_schd)).scalar_one()


def is_marked(app, msg_id) -> bool:
    return app.mailbox.processed_at([msg_id])[msg_id] is not None


def assert_no_effect(app, msg_id):
    """INV-30: no business effect: no events, and the message is not the last writer of any flight."""
    assert events(app, msg_id) == []
    with app.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(flight_schd)
                            .where(flight_schd.c.last_message_id == msg_id)).scalar_one() == 0


def register(app):
    """One intake pass (US-01): registers new mailbox rows as PENDING at the clock's time."""
    from msgx_engine.pipeline.intake import Intake

    with app.engine.connect() as conn:
        return Intake(app.mailbox, app.clock).scan(conn)


def mailbox_checksum(engine) -> dict[str, str]:
    """Both mailbox tables, every column of every row, as one digest per table (plus MariaDB's own
    CHECKSUM TABLE), so a single changed byte anywhere shows."""
    out = {}
    with engine.connect() as conn:
        for table in ("cminmsgs", "coutmsgs"):
            rows = conn.execute(text(f"SELECT * FROM {table} ORDER BY 1")).fetchall()
            digest = hashlib.sha256(repr([tuple(r) for r in rows]).encode()).hexdigest()
            server = conn.execute(text(f"CHECKSUM TABLE {table}")).fetchone()
            out[table] = f"{len(rows)}:{digest}:{server[1]}"
    return out
