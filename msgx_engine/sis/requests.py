"""Outbound request encoding (catalogue §6, Q25, D16, request lifecycle): RQFD (day plan) and RQRD (reference data).

Pure: values in, XML text out; no clock, no database. The tracker (``msgx_engine.requests``)
supplies the SEQN from PostgreSQL and the send time from its injected clock, so the same request
re-encoded during recovery differs only in DTTM.

Shapes follow the peer (BuildXmlUtil.java): META SNDR=VIEW, SEQN a 6-digit zero-padded counter,
DTTM yyyyMMddHHmmss local time, TYPE RQFD STYP NONE or TYPE RQRD STYP = requested type; the
bodies ``<RQFD><STDB>..</STDB><STDE>..</STDE></RQFD>`` (DDMONYYHHMM local, either omitted, not
both) and ``<RQRD><RTYP>..</RTYP></RQRD>``. Every output decodes with ``sis.decode.decode``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from xml.sax.saxutils import escape

from msgx_engine.sis.catalogue import REFERENCE_TYPES
from msgx_engine.sis.decode import SisRefused, decode
from msgx_engine.sis.times import dttm, dttm_local, local, sis_datetime

SENDER = "VIEW"
RQFD, RQRD = "RQFD", "RQRD"
RQFD_STYP = "NONE"
ROUTING = {RQFD: "VIEWRQFD", RQRD: "VIEWRQRD"}   # COUTMSGS.ROUTINGID, as the peer writes it
# The RTYP values the peer's RQRD accepts (catalogue §6), in the peer's order.
RQRD_TYPES: tuple[str, ...] = (
    "SLST", "GLST", "BLST", "CLST", "TLST", "ABDG", "CHLT", "PLST", "AIRC", "REGN", "AIRL", "ARPT",
    "CITY", "COUL", "REGL", "ABNR", "DLYL", "HLTR", "ORGN", "STTS", "FLTL", "VIPL", "VIPS",
)
assert frozenset(RQRD_TYPES) == REFERENCE_TYPES, "RQRD types must be the catalogue's 23 reference types"
SEQN_MAX = 999_999


class RequestInvalid(ValueError):
    """The request cannot be encoded (no window bound, unknown reference type, bad SEQN)."""


def seqn_text(seqn: int) -> str:
    """The 6-digit zero-padded SEQN (000001..999999, as the peer's counter)."""
    if not 1 <= seqn <= SEQN_MAX:
        raise RequestInvalid(f"SEQN {seqn} outside 1..{SEQN_MAX}")
    return f"{seqn:06d}"


def check_rtype(rtype: str) -> str:
    """The upper-cased reference type, or RequestInvalid when RQRD cannot ask for it."""
    code = rtype.strip().upper()
    if code not in REFERENCE_TYPES:
        raise RequestInvalid(f"{rtype!r} is not one of the {len(RQRD_TYPES)} reference types: {', '.join(RQRD_TYPES)}")
    return code


def rqfd_day(start: datetime | None, end: datetime | None) -> date:
    """The operating day an RQFD asks for: the local date of its window (D23, a RESP's day: one RQFD per day).

    Refused (``RequestInvalid``): no bound at all, a bound outside 2000-2099 (SIS writes two-digit
    years, so 1999 and 2100 would be read back as other years), a start later than the end, and a
    window whose bounds fall on different local days (the snapshot line applies an answer to one
    day and deletes only inside its window, so a window spanning days has no meaning there)."""
    bounds = [local(b) for b in (start, end) if b is not None]
    if not bounds:
        raise RequestInvalid("an RQFD needs a start or an end time (both may not be omitted)")
    for bound in bounds:
        if not 2000 <= bound.year <= 2099:
            raise RequestInvalid(f"{bound:%Y-%m-%d %H:%M} is outside the years 2000-2099 that SIS times can carry")
    if len(bounds) == 2:
        first, last = bounds
        if first > last:
            raise RequestInvalid(f"the window start {first:%Y-%m-%d %H:%M} is later than its end {last:%Y-%m-%d %H:%M}")
        if first.date() != last.date():
            raise RequestInvalid(f"the window {first:%Y-%m-%d %H:%M} .. {last:%Y-%m-%d %H:%M} spans more than one "
                                 "day: register one RQFD per day")
    return bounds[0].date()


def envelope(rtype: str, styp: str, seqn: int, now: datetime, body: str) -> str:
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<MSG>\n\t<META>\n\t\t<SNDR>{SENDER}</SNDR>\n'
            f"\t\t<SEQN>{seqn_text(seqn)}</SEQN>\n\t\t<DTTM>{dttm(now)}</DTTM>\n\t\t<TYPE>{rtype}</TYPE>\n"
            f"\t\t<STYP>{styp}</STYP>\n\t</META>\n{body}</MSG>\n")


def rqfd_body(start_text: str | None, end_text: str | None) -> str:
    if not start_text and not end_text:
        raise RequestInvalid("an RQFD needs STDB or STDE (both may not be omitted)")
    parts = [f"<STDB>{escape(start_text)}</STDB>" if start_text else "",
             f"<STDE>{escape(end_text)}</STDE>" if end_text else ""]
    return f"\t<RQFD>{''.join(parts)}</RQFD>\n"


def rqrd_body(rtype: str) -> str:
    return f"\t<RQRD><RTYP>{check_rtype(rtype)}</RTYP></RQRD>\n"


def encode(rtype: str, styp: str, seqn: int, now: datetime, *, start_text: str | None = None,
           end_text: str | None = None) -> str:
    """The mailbox body of one request as stored in ``req_track`` (rtype, styp, window texts)."""
    if rtype == RQFD:
        if styp != RQFD_STYP:
            raise RequestInvalid(f"RQFD STYP is {RQFD_STYP}, not {styp!r}")
        return envelope(RQFD, RQFD_STYP, seqn, now, rqfd_body(start_text, end_text))
    if rtype == RQRD:
        code = check_rtype(styp)
        return envelope(RQRD, code, seqn, now, rqrd_body(code))
    raise RequestInvalid(f"unknown request type {rtype!r} (RQFD or RQRD)")


def seqn_marker(seqn: int) -> str:
    """The text a sent body carries for ``seqn``: recovery finds a COUTMSGS row by it (US-08 AC2)."""
    return f"<SEQN>{seqn_text(seqn)}</SEQN>"


@dataclass(frozen=True)
class SentRequest:
    """A request as the mailbox holds it (a COUTMSGS row), whoever sent it: what an answer is
    matched against (decision L16, verdicts from the mailbox). ``sent_at`` is its DTTM: the sender's clock when it was
    sent."""

    coutmsgs_id: int
    rtype: str
    styp: str
    seqn: str
    sent_at: datetime
    fday: date | None = None
    start_text: str | None = None
    end_text: str | None = None


def read_sent(coutmsgs_id: int, body: str) -> SentRequest | None:
    """The request a COUTMSGS body carries, or None when it is not one this module could have
    written (not decodable, another type, no readable DTTM or SEQN, an RQFD window of no day)."""
    try:
        msg = decode(body)
    except SisRefused:
        return None
    meta = msg.meta
    sent_at = dttm_local(meta.dttm)
    if sent_at is None or not meta.seqn.isdigit() or meta.type not in ROUTING:
        return None
    if meta.type == RQRD:
        return SentRequest(coutmsgs_id, RQRD, meta.styp, meta.seqn, sent_at) if meta.styp in REFERENCE_TYPES else None
    start, end = (msg.root.findtext(f"RQFD/{tag}") or None for tag in ("STDB", "STDE"))
    try:
        fday = rqfd_day(sis_datetime(start or ""), sis_datetime(end or ""))
    except RequestInvalid:
        return None
    return SentRequest(coutmsgs_id, RQFD, meta.styp, meta.seqn, sent_at, fday, start, end)
