"""The requests msgx sends to the AODB (``req_track``): every statement over them and their status
words, in one place, as ``store.queue`` and its siblings are for the message queue.

Two users. The request tracker (``msgx_engine.requests.tracker``) registers, sends and times out
requests; it decides, and the statements it runs are here, each in the transaction it hands in.
The message lines find the request an answer (RESP) or an error (EROR) belongs to and close it,
inside the answering message's transaction 1 (US-08 AC5). Every statement that closes requests
also adds them to the durable ``msgx_requests_total`` in the same transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from enum import StrEnum

from sqlalchemy import Connection, RowMapping, and_, case, func, insert, or_, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert

from msgx_engine.handlers.answers import ANSWERABLE, OpenRequest, RequestCompletion
from msgx_engine.handlers.eror import InFlight, RequestFailure
from msgx_engine.sis.requests import SentRequest
from msgx_engine.store import metric_totals
from msgx_engine.store.ledger import LedgerConflict
from msgx_engine.store.outbox import OutboxRow
from msgx_engine.store.registration import ARRIVED
from msgx_engine.store.tables import proc_state, req_track


class RequestStatus(StrEnum):
    """``req_track.status``: REGISTERED -> SENT -> one of the closing words."""

    REGISTERED = "REGISTERED"   # recorded; not yet written to the AODB's COUTMSGS
    SENT = "SENT"               # written to COUTMSGS; waits for the AODB's answer
    DONE = "DONE"               # answered
    FAILED = "FAILED"           # answered with an error (EROR)
    TIMEOUT = "TIMEOUT"         # no answer in time
    EXPIRED = "EXPIRED"         # replaced by a newer request of its kind before it was written
    SHADOW = "SHADOW"           # shadow mode: encoded and recorded, never written (final)


OPEN: tuple[RequestStatus, ...] = (RequestStatus.REGISTERED, RequestStatus.SENT)
OUTCOMES: tuple[RequestStatus, ...] = (RequestStatus.DONE, RequestStatus.TIMEOUT, RequestStatus.FAILED)
_c = req_track.c


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
        c.rtype == rtype, c.sent_at.is_not(None), c.status != RequestStatus.REGISTERED)
    if styp is not None:
        query = query.where(c.styp == styp)
    rows = conn.execute(query.order_by(c.sent_at.desc(), c.req_id.desc()).limit(limit))
    return tuple(OpenRequest(r.req_id, r.fday, r.sent_at, r.start_text, r.end_text, r.seqn, r.status,
                             r.answer_msg_id) for r in rows)


def registered_at(conn: Connection, msg_id: int) -> datetime | None:
    """When the answer was registered (``proc_state.created_at``, the tracker's clock): what its
    lateness is judged by (C-23), never when the pump reaches it. A row registered after the fact
    (a rollback, a recovery) is judged by when it arrived where it was first (``arrived_at``, L16, verdicts from the
    mailbox)."""
    return conn.execute(select(ARRIVED).where(proc_state.c.msg_id == msg_id)).scalar()


def sent_requests(conn: Connection, rtype: str) -> tuple[OpenRequest, ...]:
    """Every SENT request of ``rtype`` with its window, newest first (C-24 allows one per type);
    only to say why an answer matched none."""
    c = req_track.c
    rows = conn.execute(select(c.req_id, c.fday, c.sent_at, c.start_text, c.end_text)
                        .where(c.rtype == rtype, c.status == RequestStatus.SENT).order_by(c.req_id.desc()))
    return tuple(OpenRequest(r.req_id, r.fday, r.sent_at, r.start_text, r.end_text) for r in rows)


def complete_request(conn: Connection, plan: RequestCompletion, msg_id: int, now: datetime) -> list[OutboxRow]:
    """The RESP answers its request in the same transaction (US-06 AC4, US-08 AC5). A request the
    tracker timed out before the pump reached an answer registered in time is answered all the
    same (C-23: lateness is judged by the registration). A request closed otherwise under us
    raises LedgerConflict: the whole transaction rolls back."""
    c = req_track.c
    done = conn.execute(update(req_track).where(c.req_id == plan.req_id, c.status.in_(ANSWERABLE))
                        .values(status=RequestStatus.DONE, answer_msg_id=msg_id, done_at=now,
                                detail=case((c.status == RequestStatus.TIMEOUT, "answered in time; the answer was "
                                             "processed after the tracker had timed the request out"),
                                            else_=None))
                        .returning(c.rtype)).first()
    if done is None:
        raise LedgerConflict(f"request {plan.req_id} is no longer open", None, None)
    count_closed(conn, RequestStatus.DONE, [done.rtype])
    return []


def inflight_requests(conn: Connection) -> tuple[InFlight, ...]:
    """Every SENT request, oldest first (C-24: at most one per request type)."""
    c = req_track.c
    rows = conn.execute(select(c.req_id, c.rtype, c.styp, c.seqn).where(c.status == RequestStatus.SENT)
                        .order_by(c.req_id))
    return tuple(InFlight(r.req_id, r.rtype, r.styp, r.seqn) for r in rows)


def fail_request(conn: Connection, plan: RequestFailure, msg_id: int, now: datetime) -> list[OutboxRow]:
    """The EROR fails the request it answers (C-24, D28): FAILED frees the type's slot for the next
    REGISTERED request. A request no longer SENT raises LedgerConflict (rolled back and retried)."""
    done = conn.execute(update(req_track).where(_c.req_id == plan.req_id, _c.status == RequestStatus.SENT)
                        .values(status=RequestStatus.FAILED, answer_msg_id=msg_id, done_at=now, detail=plan.error)
                        .returning(_c.rtype)).first()
    if done is None:
        raise LedgerConflict(f"request {plan.req_id} is no longer SENT", None, None)
    count_closed(conn, RequestStatus.FAILED, [done.rtype])
    return []


# --- the tracker's lifecycle: register, send, time out -------------------------------------------
def expire_unsent(conn: Connection, rtype: str, styp: str, now: datetime) -> list[int]:
    """A newer registration replaces the requests of its kind that have not landed (REGISTERED with
    no SEQN chosen yet): they become EXPIRED. Their ids."""
    expired = conn.execute(
        update(req_track).where(_c.rtype == rtype, _c.styp == styp, _c.status == RequestStatus.REGISTERED,
                                _c.seqn.is_(None))
        .values(status=RequestStatus.EXPIRED, done_at=now, detail="superseded by a newer request of the same kind")
        .returning(_c.req_id)).scalars().all()
    count_closed(conn, RequestStatus.EXPIRED, [rtype] * len(expired))
    return list(expired)


def asked_already(conn: Connection, rtype: str, styp: str, fday: date, start_text: str | None,
                  end_text: str | None) -> tuple[int, str] | None:
    """The latest request of this kind for ``fday`` and the same window that stands (any status but
    EXPIRED: registered, in flight, answered, failed or timed out): its id and status (T12, day plan once a day)."""
    found = conn.execute(select(_c.req_id, _c.status).where(
        _c.rtype == rtype, _c.styp == styp, _c.fday == fday, _c.start_text.is_not_distinct_from(start_text),
        _c.end_text.is_not_distinct_from(end_text), _c.status != RequestStatus.EXPIRED)
        .order_by(_c.req_id.desc()).limit(1)).first()
    return (int(found.req_id), str(found.status)) if found is not None else None


def insert_registered(conn: Connection, rtype: str, styp: str, fday: date | None, start_text: str | None,
                      end_text: str | None, now: datetime) -> int:
    """A new REGISTERED request; its id."""
    return int(conn.execute(insert(req_track).values(
        rtype=rtype, styp=styp, fday=fday, start_text=start_text, end_text=end_text,
        status=RequestStatus.REGISTERED, created_at=now).returning(_c.req_id)).scalar_one())


def note_superseded(conn: Connection, expired: Sequence[int], by: int) -> None:
    """Name the request that replaced the expired ones in their detail."""
    if expired:
        conn.execute(update(req_track).where(_c.req_id.in_(expired))
                     .values(detail=func.concat("superseded by request ", str(by))))


@dataclass(frozen=True)
class Sendable:
    """The next request to write to COUTMSGS; ``seqn`` is set when an earlier attempt chose it."""

    req_id: int
    rtype: str
    styp: str
    start_text: str | None
    end_text: str | None
    seqn: str | None


def next_sendable(conn: Connection, now: datetime, timeout_s: Mapping[str, float]) -> Sendable | None:
    """The oldest REGISTERED request whose type has nothing SENT (one in flight per type, C-24) and
    whose kind (type and subtype: what an answer is matched by) has had no request time out in the
    last ``timeout_s[rtype]`` seconds (decision L14, after a timeout: a late answer to it must find no newer request
    in flight), row-locked (skipping rows another sender holds)."""
    s = req_track.alias("s")
    inflight = select(s.c.req_id).where(s.c.rtype == _c.rtype, s.c.status == RequestStatus.SENT).exists()
    resting = select(s.c.req_id).where(
        s.c.rtype == _c.rtype, s.c.styp == _c.styp, s.c.status == RequestStatus.TIMEOUT,
        or_(*(and_(s.c.rtype == rtype, s.c.done_at > now - timedelta(seconds=secs))
              for rtype, secs in timeout_s.items()))).exists()
    row = conn.execute(select(_c.req_id, _c.rtype, _c.styp, _c.start_text, _c.end_text, _c.seqn)
                       .where(_c.status == RequestStatus.REGISTERED, ~inflight, ~resting)
                       .order_by(_c.req_id).limit(1).with_for_update(skip_locked=True)).first()
    return None if row is None else Sendable(row.req_id, row.rtype, row.styp, row.start_text, row.end_text,
                                             row.seqn)


def next_seqn(conn: Connection) -> int:
    """The next request sequence number (``req_seqn``)."""
    return int(conn.execute(text("SELECT nextval('req_seqn')")).scalar_one())


def set_seqn(conn: Connection, req_id: int, seqn: str) -> None:
    conn.execute(update(req_track).where(_c.req_id == req_id).values(seqn=seqn))


def record_shadow(conn: Connection, req_id: int, now: datetime, detail: str) -> None:
    """Shadow mode: a REGISTERED request ends SHADOW with what would have been written."""
    shadowed = conn.execute(update(req_track).where(_c.req_id == req_id, _c.status == RequestStatus.REGISTERED)
                            .values(status=RequestStatus.SHADOW, done_at=now, detail=detail)
                            .returning(_c.rtype)).scalars().all()
    count_closed(conn, RequestStatus.SHADOW, shadowed)


def mark_sent(conn: Connection, req_id: int, coutmsgs_id: int, now: datetime) -> bool:
    """REGISTERED -> SENT with its COUTMSGS row; False when the request left REGISTERED meanwhile."""
    return conn.execute(update(req_track).where(_c.req_id == req_id, _c.status == RequestStatus.REGISTERED)
                        .values(status=RequestStatus.SENT, coutmsgs_id=coutmsgs_id, sent_at=now)
                        .returning(_c.req_id)).first() is not None


def keep_coutmsgs_id(conn: Connection, req_id: int, coutmsgs_id: int) -> None:
    """Record the COUTMSGS row of a request closed while it was being sent (the audit trail)."""
    conn.execute(update(req_track).where(_c.req_id == req_id, _c.coutmsgs_id.is_(None))
                 .values(coutmsgs_id=coutmsgs_id))


def time_out(conn: Connection, now: datetime, timeout_s: Mapping[str, float]) -> list[int]:
    """SENT requests with no answer ``timeout_s[rtype]`` seconds after ``sent_at`` become TIMEOUT; their ids."""
    due = or_(*(and_(_c.rtype == rtype, _c.sent_at <= now - timedelta(seconds=secs))
                for rtype, secs in timeout_s.items()))
    closed = conn.execute(update(req_track).where(_c.status == RequestStatus.SENT, due)
                          .values(status=RequestStatus.TIMEOUT, done_at=now, detail=case(
                              *((_c.rtype == rtype, f"no answer within {secs:g} s of sent_at")
                                for rtype, secs in timeout_s.items())))
                          .returning(_c.req_id, _c.rtype)).all()
    count_closed(conn, RequestStatus.TIMEOUT, [r.rtype for r in closed])
    return [r.req_id for r in closed]


def open_requests(conn: Connection) -> list[RowMapping]:
    """The open requests (REGISTERED, SENT), oldest first, for status output."""
    return list(conn.execute(select(_c.req_id, _c.rtype, _c.styp, _c.fday, _c.status, _c.seqn, _c.coutmsgs_id,
                                    _c.sent_at).where(_c.status.in_(OPEN)).order_by(_c.req_id)).mappings().all())


# --- requests another installation sent (decision L16) --------------------------------------------
ADOPTED = "sent by another installation: read from the mailbox (COUTMSGS id {})"


def adoption_position(conn: Connection) -> int:
    """The largest COUTMSGS id this installation holds a request for: rows above it are read."""
    return int(conn.execute(select(func.coalesce(func.max(_c.coutmsgs_id), 0))).scalar_one())


def being_sent(conn: Connection) -> set[tuple[str, str, str]]:
    """(rtype, styp, seqn) of this installation's requests whose SEQN is chosen but whose COUTMSGS
    row is not recorded yet: a row carrying one of them is its own, not another installation's."""
    rows = conn.execute(select(_c.rtype, _c.styp, _c.seqn).where(_c.status == RequestStatus.REGISTERED,
                                                                 _c.seqn.is_not(None)))
    return {(r.rtype, r.styp, r.seqn) for r in rows}


def adopt(conn: Connection, requests: Sequence[SentRequest], now: datetime,
          timeout_s: Mapping[str, float]) -> list[int]:
    """Record requests another installation wrote to COUTMSGS as this installation's own sent
    ones, so an answer to them gets the verdict it gets there (decision L16): SENT, or TIMEOUT
    when their timeout has passed (``done_at`` the instant it passed). Their ids."""
    known = set(conn.execute(select(_c.coutmsgs_id).where(
        _c.coutmsgs_id.in_([r.coutmsgs_id for r in requests]))).scalars()) if requests else set()
    rows = []
    for r in requests:
        if r.coutmsgs_id in known:
            continue
        timed_out = r.sent_at + timedelta(seconds=timeout_s[r.rtype])
        closed = timed_out <= now
        rows.append({"rtype": r.rtype, "styp": r.styp, "fday": r.fday, "start_text": r.start_text,
                     "end_text": r.end_text, "seqn": r.seqn, "coutmsgs_id": r.coutmsgs_id, "created_at": now,
                     "sent_at": r.sent_at, "status": RequestStatus.TIMEOUT if closed else RequestStatus.SENT,
                     "adopted": True, "done_at": timed_out if closed else None,
                     "detail": ADOPTED.format(r.coutmsgs_id)})
    if not rows:
        return []
    return list(conn.execute(pg_insert(req_track).values(rows).on_conflict_do_nothing(
        index_elements=[_c.coutmsgs_id], index_where=_c.adopted).returning(_c.req_id)).scalars())


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
                        .where(c.status.in_(OUTCOMES))
                        .distinct(c.rtype, c.styp).order_by(c.rtype, c.styp, c.req_id.desc()))
    return [(r[0], r[1], r[2], int(r[3])) for r in rows]
