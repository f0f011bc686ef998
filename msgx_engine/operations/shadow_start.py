"""Where a shadow starts, and the state database it must never share with production (OPS-3, D29, shadow mode).

**Starting point.** A fresh shadow left to itself adopts the mailbox where production stands: the
rows production already marked are history to it, so its state starts empty and every flight those
rows built is missing from any comparison. ``msgx shadow start-from ID`` (audited) instead sets the
shadow's high-water mark just below ``ID``: intake then reads every row from ``ID`` on by id, marked
or not (a shadow never writes the mailbox, so reading marked rows is safe), and the shadow rebuilds
the flights exactly as production built them. We replay rather than copy production's state at a
watermark because a replay tests what the shadow is there to test, its own processing of the same
input; a copy would only prove that a copy is equal, and would take production's database as input.
Choose the first id of the oldest day still live (a day's snapshot and everything after it), so
``msgx compare`` has every live flight on both sides from the first hour.

**Not production's database.** A shadow pointed at production's state database would process into
it beside production's pump. Without a column that records the mode (no migration this round) the
database tells by its own history: a database that owes or wrote processed marks in the mailbox
(``backfill_todo`` other than ``SHADOW``) or sent requests to the AODB (a ``req_track`` row with a
COUTMSGS id it wrote itself, not one read from the mailbox: decision L16, verdicts from the mailbox) belongs to a
production installation. A shadow refuses to start on it. A production database that has processed nothing
yet (or whose every message was archived) cannot be told apart.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, text, update

from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.store import audit, cutover_state, locks, registration
from msgx_engine.store.session_lock import SessionLock
from msgx_engine.store.status import TodoStatus
from msgx_engine.store.tables import intake_state

log = logging.getLogger(__name__)


class ShadowStartRefused(RuntimeError):
    """``msgx shadow start-from`` cannot set the starting point (the reason is the message)."""


class ShadowStartBusy(RuntimeError):
    """A pump holds this state database's pump lock."""


@dataclass(frozen=True)
class ShadowStart:
    start_id: int
    high_water: int
    audit_id: int
    marked_from_start: int      # rows from the start id on that production had already marked


def start_from(engine: Engine, mailbox: Mailbox, start_id: int, *, operator: str, reason: str) -> ShadowStart:
    """Set a fresh shadow's high-water mark to ``start_id - 1`` (module doc), audited, while no pump
    runs. Refused: outside shadow mode (production would take marked rows above its mark for a lost
    state), on a database that registered any message already (its flights would be built twice),
    and for an id that is not a mailbox row (a typo would skip or add a day silently)."""
    if not operator.strip() or not reason.strip():
        raise ValueError("needs --operator NAME and --reason TEXT")
    if not mailbox.read_only:
        raise ShadowStartRefused(
            "this installation is not a shadow (MSGX_MODE is not shadow): a production installation starts where "
            "the mailbox's processed marks stand (see `msgx adopt` and `msgx recover`)")
    if start_id < 1:
        raise ShadowStartRefused(f"the start id must be a mailbox id (1 or more), not {start_id}")
    if start_id not in mailbox.exists([start_id]):
        raise ShadowStartRefused(f"mailbox id {start_id} does not exist: give the id of an existing row "
                                 "(the first message of the oldest day to compare)")
    lock = SessionLock(engine, locks.PUMP, "msgx shadow start-from", ShadowStartBusy, refusal=(
        "a msgx pump is running on this state database: stop it (and the Dagster sensor that starts it) first"))
    with lock.held() as conn:
        with conn.begin():
            locks.lock_writer_row(conn)
            pos = registration.intake_position(conn)
            if pos.max_registered:
                raise ShadowStartRefused(
                    f"this shadow has already registered mailbox rows up to id {pos.max_registered}: a starting "
                    "point can only be set on a fresh state database (create an empty one, `msgx db upgrade`, "
                    "and run this again)")
            marked = mailbox.marked_above(start_id - 1, None).count
            high = start_id - 1
            audit_id = audit.record(conn, operator, "shadow_start_from", reason,
                                    {"start_id": start_id, "previous_high_water": pos.high_water},
                                    {"high_water": high, "marked_from_start": marked})
            conn.execute(update(intake_state).where(intake_state.c.name == registration.INTAKE).values(high_water=high))
            cutover_state.claim_shadow(conn)     # a production pump refuses this database from now on
    log.warning("shadow start-from (audit %s): mailbox rows from id %s on are read and processed, %s of them "
                "already marked by production", audit_id, start_id, marked)
    return ShadowStart(start_id, high, audit_id, marked)


_PRODUCTION_EVIDENCE_SQL = text(
    "SELECT (SELECT count(*) FROM (SELECT 1 FROM backfill_todo WHERE status <> :shadow LIMIT 1) t), "
    "(SELECT count(*) FROM (SELECT 1 FROM req_track WHERE coutmsgs_id IS NOT NULL AND NOT adopted LIMIT 1) r)")


def production_evidence(conn: Connection) -> str | None:
    """Why this state database belongs to a production installation, or None (module doc)."""
    marks, requests = conn.execute(_PRODUCTION_EVIDENCE_SQL, {"shadow": TodoStatus.SHADOW.value}).one()
    if marks:
        return "it has written (or owes) processed marks in the mailbox"
    if requests:
        return "it has sent requests to the AODB"
    return None
