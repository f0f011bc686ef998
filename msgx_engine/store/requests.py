"""``req_track`` as the message lines see it: the open request a RESP may answer and its
completion, the requests in flight an EROR may answer and their failure.

The request lifecycle itself (register, send, time out) is the tracker's (``msgx_engine.requests``);
these statements run inside the answering message's transaction 1 (US-08 AC5).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, func, select, update

from msgx_engine.handlers.answers import OpenRequest, RequestCompletion
from msgx_engine.handlers.eror import InFlight, RequestFailure
from msgx_engine.store.ledger import LedgerConflict
from msgx_engine.store.outbox import OutboxRow
from msgx_engine.store.tables import req_track

SENT, DONE, FAILED = "SENT", "DONE", "FAILED"


def open_request(conn: Connection, rtype: str, styp: str | None = None) -> OpenRequest | None:
    """The newest SENT request of ``rtype`` (RQFD, or RQRD for reference type ``styp``); D16
    allows one open request per (TYPE, STYP). The RESP handlers judge its DTTM purely."""
    query = select(req_track.c.req_id, req_track.c.fday, req_track.c.sent_at).where(
        req_track.c.rtype == rtype, req_track.c.status == SENT)
    if styp is not None:
        query = query.where(req_track.c.styp == styp)
    row = conn.execute(query.order_by(req_track.c.req_id.desc()).limit(1)).first()
    return OpenRequest(row.req_id, row.fday, row.sent_at) if row else None


def sent_requests(conn: Connection, rtype: str) -> tuple[OpenRequest, ...]:
    """Every SENT request of ``rtype`` with its window, newest first (C-24 allows one per type; a
    RESP is matched to the one of its own day, D23)."""
    c = req_track.c
    rows = conn.execute(select(c.req_id, c.fday, c.sent_at, c.start_text, c.end_text)
                        .where(c.rtype == rtype, c.status == SENT).order_by(c.req_id.desc()))
    return tuple(OpenRequest(r.req_id, r.fday, r.sent_at, r.start_text, r.end_text) for r in rows)


def complete_request(conn: Connection, plan: RequestCompletion, msg_id: int, now: datetime) -> list[OutboxRow]:
    """The RESP answers the open request in the same transaction (US-06 AC4, US-08 AC5); a request
    no longer SENT (closed under us) raises LedgerConflict: the whole transaction rolls back."""
    done = conn.execute(update(req_track).where(req_track.c.req_id == plan.req_id, req_track.c.status == SENT)
                        .values(status=DONE, answer_msg_id=msg_id, done_at=now).returning(req_track.c.req_id))
    if done.first() is None:
        raise LedgerConflict(f"request {plan.req_id} is no longer SENT", None, None)
    return []


def inflight_requests(conn: Connection) -> tuple[InFlight, ...]:
    """Every SENT request, oldest first (C-24: at most one per request type)."""
    c = req_track.c
    rows = conn.execute(select(c.req_id, c.rtype, c.styp, c.seqn).where(c.status == SENT).order_by(c.req_id))
    return tuple(InFlight(r.req_id, r.rtype, r.styp, r.seqn) for r in rows)


def fail_request(conn: Connection, plan: RequestFailure, msg_id: int, now: datetime) -> list[OutboxRow]:
    """The EROR fails the request it answers (C-24, D28): FAILED frees the type's slot for the next
    REGISTERED request. A request no longer SENT raises LedgerConflict (rolled back and retried)."""
    done = conn.execute(update(req_track).where(req_track.c.req_id == plan.req_id, req_track.c.status == SENT)
                        .values(status=FAILED, answer_msg_id=msg_id, done_at=now, detail=plan.error)
                        .returning(req_track.c.req_id))
    if done.first() is None:
        raise LedgerConflict(f"request {plan.req_id} is no longer SENT", None, None)
    return []


# --- figures for the monitor (read-only) ------------------------------------------------------------
def status_counts(conn: Connection) -> list[tuple[str, str, int]]:
    """(rtype, status, count) over ``req_track``: open (REGISTERED/SENT) and timed-out requests."""
    c = req_track.c
    rows = conn.execute(select(c.rtype, c.status, func.count()).group_by(c.rtype, c.status)
                        .order_by(c.rtype, c.status))
    return [(r[0], r[1], int(r[2])) for r in rows]


def latest_outcomes(conn: Connection) -> list[tuple[str, str, str, int]]:
    """Per (rtype, styp), the newest request that left SENT for an outcome (DONE, TIMEOUT, FAILED):
    (rtype, styp, status, req_id). A TIMEOUT here stays until a later request of that kind is
    answered (the request-timeouts check)."""
    c = req_track.c
    rows = conn.execute(select(c.rtype, c.styp, c.status, c.req_id)
                        .where(c.status.in_(("DONE", "TIMEOUT", FAILED)))
                        .distinct(c.rtype, c.styp).order_by(c.rtype, c.styp, c.req_id.desc()))
    return [(r[0], r[1], r[2], int(r[3])) for r in rows]
