"""Answers to msgx's own requests (D16, US-08 AC4/AC5): the open request a RESP may answer, the
rule that an answer may not precede its request, and the plan that completes the request.

Shared by the snapshot line (SCHD RESP answers an RQFD) and the reference line (``<type>`` RESP
answers an RQRD). Pure: the request is read by the route's loader, completed by the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime

from msgx_engine.handlers.decision import Plan
from msgx_engine.sis.decode import SisMessage
from msgx_engine.sis.times import dttm_local


@dataclass(frozen=True)
class OpenRequest:
    """The open (SENT) request a RESP may answer (D16); an RQFD's window as sent (STDB/STDE,
    DDMONYYHHMM local, either may be None) bounds what its answer may delete (D23)."""

    req_id: int
    fday: date | None
    sent_at: datetime | None
    start_text: str | None = None
    end_text: str | None = None


@dataclass(frozen=True)
class RequestCompletion(Plan):
    """The answered request becomes DONE in the answer's transaction 1 (US-06 AC4, US-08 AC5)."""

    req_id: int


def answered_too_early(msg: SisMessage, request: OpenRequest, *, strict: bool = False) -> str | None:
    """Why the answer's META DTTM (local time) cannot answer ``request``, or None (US-08 AC4).

    DTTM must not precede the request's ``sent_at``. Lenient (the snapshot RESP) lets an unknown
    send time or an unreadable DTTM pass; ``strict`` (the reference RESP) refuses both.
    """
    stamp = dttm_local(msg.meta.dttm)
    if stamp is None:
        return f"answer DTTM {msg.meta.dttm!r} is unreadable" if strict else None
    if request.sent_at is None:
        return f"open request {request.req_id} has no send time" if strict else None
    if stamp < request.sent_at:
        return f"answer DTTM {msg.meta.dttm} precedes request {request.req_id} sent at {request.sent_at.isoformat()}"
    return None
