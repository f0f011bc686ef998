"""``req_track`` as the message lines see it: the open request a RESP may answer and its
completion, the requests in flight an EROR may answer and their failure.

The request lifecycle itself (register, send, time out) is the tracker's (``msgx_engine.requests``);
these statements run inside the answering message's transaction 1 (US-08 AC5).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import Connection, case, func, select, update

from msgx_engine.handlers.answers import ANSWERABLE, OpenRequest, RequestCompletion
from msgx_engine.handlers.eror import InFlight, RequestFailure
from msgx_engine.store import metric_totals
from msgx_engine.store.ledger import LedgerConflict
from msgx_engine.store.outbox import OutboxRow
from msgx_engine.store.tables import proc_state, req_track

SENT, DONE, FAILED = "SENT", "DONE", "FAILED"


def count_closed(conn: Connection, outcome: str, kinds: Iterable[str]) -> None:
    """Add the requests just closed (one per kind in ``kinds``: RQFD, RQRD) to the durable
    ``msgx_requests_total{kind, outcome}``, in the transaction that closed them; one statement."""
    deltas = metric_totals.Deltas()
    for kind in kinds:
        deltas.count(metric_totals.REQUESTS, {"kind": kind, "outcome": outcome})
    metric_totals.add(conn, deltas)


def answer_candidates(conn: Connection, rtype: str, styp: str | None = None,
                      limit: int = 20) -> tuple[OpenRequest, ...]:
    """The newest sent requests of ``rtype`` (RQFD, or RQRD for reference type ``styp``), newest
    first, whatever their status: the answer matcher (``handlers.answers.select_request``) needs
    the closed ones too, to tell a late answer from a stray one (C-23)."""
    c = req_track.c
    query = select(c.req_id, c.fday, c.sent_at, c.start_text, c.end_text, c.seqn, c.status, c.answer_msg_id).where(
        c.rtype == rtype, c.sent_at.is_not(None), c.status != "REGISTERED")
    if styp is not None:
        query = query.where(c.styp == styp)
    rows = conn.execute(query.order_by(c.sent_at.desc(), c.req_id.desc()).limit(limit))
    return tuple(OpenRequest(r.req_id, r.fday, r.sent_at, r.start_text, r.end_text, r.seqn, r.status,
                             r.answer_msg_id) for r in rows)


def registered_at(conn: Connection, msg_id: int) -> datetime | None:
    """When the answer was registered (``proc_state.created_at``, the tracker's clock): what its
    lateness is judged by (C-23), never when the pump reaches it."""
    return conn.execute(select(proc_state.c.created_at).where(proc_state.c.msg_id == msg_id)).scalar()


def sent_requests(conn: Connection, rtype: str) -> tuple[OpenRequest, ...]:
    """Every SENT request of ``rtype`` with its window, newest first (C-24 allows one per type);
    only to say why an answer matched none."""
    c = req_track.c
    rows = conn.execute(select(c.req_id, c.fday, c.sent_at, c.start_text, c.end_text)
                        .where(c.rtype == rtype, c.status == SENT).order_by(c.req_id.desc()))
    return tuple(OpenRequest(r.req_id, r.fday, r.sent_at, r.start_text, r.end_text) for r in rows)


def complete_request(conn: Connection, plan: RequestCompletion, msg_id: int, now: datetime) -> list[OutboxRow]:
    """The RESP answers its request in the same transaction (US-06 AC4, US-08 AC5). A request the
    tracker timed out before the pump reached an answer registered in time is answered all the
    same (C-23: lateness is judged by the registration). A request closed otherwise under us
    raises LedgerConflict: the whole transaction rolls back."""
    c = req_track.c
    done = conn.execute(update(req_track).where(c.req_id == plan.req_id, c.status.in_(ANSWERABLE))
                        .values(status=DONE, answer_msg_id=msg_id, done_at=now,
                                detail=case((c.status == "TIMEOUT", "answered in time; the answer was "
                                             "processed after the tracker had timed the request out"),
                                            else_=None))
                        .returning(c.rtype)).first()
    if done is None:
        raise LedgerConflict(f"request {plan.req_id} is no longer open", None, None)
    count_closed(conn, DONE, [done.rtype])
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
                        .returning(req_track.c.rtype)).first()
    if done is None:
        raise LedgerConflict(f"request {plan.req_id} is no longer SENT", None, None)
    count_closed(conn, FAILED, [done.rtype])
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
