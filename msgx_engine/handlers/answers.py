"""Answers to msgx's own requests (D16, request lifecycle, US-08 AC4/AC5, C-23, C-24): which request a RESP answers,
whether it came in time, and the plan that completes the request.

Shared by the snapshot line (SCHD RESP answers an RQFD) and the reference line (``<type>`` RESP
answers an RQRD). Pure: the candidate requests and the answer's registration time are read by the
route's loader, the completion is written by the store.

The rule (docs/requests.md, decisions L1, newer request and answers; L2, late answers; L14, after a timeout; L15,
empty RESP without echo):

1. an echoed SEQN (a ``SEQN`` element outside META, as for EROR) names the request; an echo that
   names none of ours matches nothing;
2. otherwise the answer goes to the newest request of its kind (and, for a RESP with flights, of
   its day) that was sent no later than the second the answer was registered: at most one request
   per kind is in flight at a time (C-24), so that is the one that was in flight when it arrived;
3. the answer is late when that request was already closed (DONE, FAILED, EXPIRED) or when it was
   registered the request's timeout (RQFD 60 s, RQRD 30 s) or more after ``sent_at``, the instant
   the tracker times a request out. Judged by the registration, not by the request's status when
   the pump reaches the answer: a backlog or a stopped tracker changes nothing. A request the
   tracker timed out is still answered by an answer registered in time; the next request of its
   kind is sent only a further timeout later (decision L14, after a timeout), so a late answer finds the old one;
4. an answer that names no day (an empty SCHD RESP) and echoes nothing is refused while a request
   of another day may still be answered (decision L15, empty RESP without echo).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from msgx_engine.handlers.decision import Plan
from msgx_engine.handlers.eror import echoed_seqns
from msgx_engine.sis.decode import SisMessage
from msgx_engine.sis.times import dttm_local

# How long after ``sent_at`` an answer may be registered (US-08 AC3); the tracker times requests
# out by the same figures.
TIMEOUT_S: dict[str, float] = {"RQFD": 60.0, "RQRD": 30.0}
ANSWERABLE = ("SENT", "TIMEOUT")      # an answer registered in time completes either
LATE_ANSWER = "late_answer"
NO_REQUEST = "no_request"


@dataclass(frozen=True)
class OpenRequest:
    """A sent request a RESP may answer (D16); an RQFD's window as sent (STDB/STDE, DDMONYYHHMM
    local, either may be None) bounds what its answer may delete (D23, a RESP's day). ``status`` and
    ``answer_msg_id`` say whether it is still open; ``seqn`` is what an echo names."""

    req_id: int
    fday: date | None
    sent_at: datetime | None
    start_text: str | None = None
    end_text: str | None = None
    seqn: str | None = None
    status: str = "SENT"
    answer_msg_id: int | None = None


@dataclass(frozen=True)
class AnswerRefusal:
    """Why an answer is taken by no request: ``no_request`` or ``late_answer`` (SKIPPED, audited);
    ``alert``: an operator must hear of it (a late answer always)."""

    reason: str
    detail: str
    alert: bool = False


@dataclass(frozen=True)
class RequestCompletion(Plan):
    """The answered request becomes DONE in the answer's transaction 1 (US-06 AC4, US-08 AC5)."""

    req_id: int


def _seqn(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def _to_second(moment: datetime) -> datetime:
    """SIS times have whole seconds: compare ours at that resolution too."""
    return moment.replace(microsecond=0)


def select_request(msg: SisMessage, rtype: str, candidates: Sequence[OpenRequest], received_at: datetime | None,
                   fits: Callable[[OpenRequest], bool] = lambda r: True, *, dayless: bool = False
                   ) -> tuple[OpenRequest | None, AnswerRefusal | None]:
    """The request an answer of ``rtype``'s kind answers (see the module doc), or why none.

    ``candidates`` are the sent requests of the kind, newest first; ``received_at`` is the
    answer's registration (None: unknown, then only the request's status is judged); ``fits``
    says whether a request asked for what the answer carries (an RQFD's day). ``dayless``: the
    answer says nothing of the day it is for (an empty SCHD RESP), so without an echo it is refused
    when it may be the late answer to a timed-out request of another day (decision L15). (None,
    None): nothing was in flight for it; the caller says why in its own words.
    """
    echoes = echoed_seqns(msg)
    if echoes:
        hits = [r for r in candidates if _seqn(r.seqn) in echoes]
        if not hits:
            return None, AnswerRefusal(NO_REQUEST, f"the answer echoes SEQN {sorted(echoes)}, which names no "
                                                   f"{rtype} request of ours")
        chosen = hits[0]
        if not fits(chosen):
            return None, AnswerRefusal(NO_REQUEST, f"the answer echoes the SEQN of request {chosen.req_id}, which "
                                                   f"asked for something else (day {chosen.fday})")
    else:
        pool = [r for r in candidates if fits(r) and r.sent_at is not None
                and (received_at is None or _to_second(r.sent_at) <= received_at)]
        if not pool:
            return None, None
        chosen = pool[0]
        if dayless:
            request, refusal = _judge(rtype, chosen, received_at)
            return (request, refusal) if refusal is not None else _unambiguous(chosen, pool[1:])
    return _judge(rtype, chosen, received_at)


def _unambiguous(chosen: OpenRequest, older: Sequence[OpenRequest]
                 ) -> tuple[OpenRequest | None, AnswerRefusal | None]:
    """``chosen``, unless an answer that names no day may as well be the late answer to a request
    of another day sent before it and never answered (decision L15). The AODB answers its requests
    in order, so only the requests that timed out since the last one of the kind that was answered
    or failed can still be answered. An older one still SENT is unanswered too (one read from the
    mailbox in an installation whose tracker does not run, decision L16, verdicts from the mailbox)."""
    others = []
    for request in older:                       # newest first, all sent before ``chosen``
        if request.status not in ANSWERABLE:
            break
        if request.fday != chosen.fday:
            others.append(f"request {request.req_id} for {request.fday}")
    if not others:
        return chosen, None
    return None, AnswerRefusal(NO_REQUEST, f"an empty answer without a SEQN echo names no day: it may be the late "
                                           f"answer to {', '.join(others)}, which timed out, as well as the answer "
                                           f"to request {chosen.req_id} for {chosen.fday}; not applied", alert=True)


def _judge(rtype: str, request: OpenRequest, received_at: datetime | None
           ) -> tuple[OpenRequest | None, AnswerRefusal | None]:
    """The request, unless it was closed before the answer or the answer came after its timeout."""
    if request.status not in ANSWERABLE:
        by = f" by message {request.answer_msg_id}" if request.answer_msg_id is not None else ""
        return None, AnswerRefusal(LATE_ANSWER, f"request {request.req_id} was already {request.status}{by}: "
                                                "a late or repeated answer, not applied")
    limit = TIMEOUT_S.get(rtype)
    if received_at is not None and request.sent_at is not None and limit is not None:
        deadline = request.sent_at + timedelta(seconds=limit)
        if received_at >= deadline:          # the tracker times it out at the same instant
            late = (received_at - request.sent_at).total_seconds()
            return None, AnswerRefusal(LATE_ANSWER, f"registered {late:.0f} s after request {request.req_id} was "
                                                    f"sent, later than its {limit:g} s limit: not applied")
    return request, None


def answered_too_early(msg: SisMessage, request: OpenRequest, *, strict: bool = False) -> str | None:
    """Why the answer's META DTTM (local time) cannot answer ``request``, or None (US-08 AC4).

    DTTM must not precede the request's ``sent_at`` (to the second: DTTM has no fraction).
    Lenient (the snapshot RESP) lets an unknown send time or an unreadable DTTM pass; ``strict``
    (the reference RESP) refuses both.
    """
    stamp = dttm_local(msg.meta.dttm)
    if stamp is None:
        return f"answer DTTM {msg.meta.dttm!r} is unreadable" if strict else None
    if request.sent_at is None:
        return f"open request {request.req_id} has no send time" if strict else None
    if stamp < _to_second(request.sent_at):
        return f"answer DTTM {msg.meta.dttm} precedes request {request.req_id} sent at {request.sent_at.isoformat()}"
    return None
