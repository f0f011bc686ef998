"""EROR: the AODB says a request of ours failed (C-24, US-08, D9, default ignore list; D28, EROR). Pure: message + the
requests in flight -> Decision.

No EROR sample exists, so the rule reads as little structure as possible and is documented in
docs/requests.md:

1. an echoed SEQN (any ``SEQN`` element outside META) names the request by its SEQN; an echo
   that names no request in flight matches nothing (a closed request is never "corrected" onto
   another one);
2. otherwise any element whose text is ``RQFD`` or ``RQRD`` names the request type: the request
   of that type in flight (C-24 allows one per type) is the one; naming both types is ambiguous;
3. otherwise, with exactly one request in flight, that one.

The matched request becomes FAILED with the error text and frees its type's slot; the EROR
itself ends SUCCEEDED; an alert fires. No match: SKIPPED(no_request) with an alert, nothing written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lxml import etree

from msgx_engine.handlers.decision import Decision, Plan
from msgx_engine.sis.decode import SisMessage

REQUEST_TYPES = ("RQFD", "RQRD")
MAX_ERROR_TEXT = 2000


@dataclass(frozen=True)
class InFlight:
    """A SENT request an EROR may answer."""

    req_id: int
    rtype: str             # RQFD | RQRD
    styp: str
    seqn: str | None


@dataclass(frozen=True)
class ErorContext:
    """What the route loads: every request in flight (status SENT), oldest first."""

    inflight: tuple[InFlight, ...] = ()


@dataclass(frozen=True)
class RequestFailure(Plan):
    """The answered request becomes FAILED with the error text, in the EROR's transaction 1."""

    req_id: int
    error: str


def _elements(msg: SisMessage) -> list[etree._Element]:
    """Every element of the message except META's own children (the EROR's SEQN, TYPE, ...)."""
    meta = msg.root.find("META")
    skip = set(meta) if meta is not None else set()
    return [el for el in msg.root.iter() if isinstance(el.tag, str) and el not in skip and el is not msg.root]


def _seqn(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def _path(el: etree._Element, root: etree._Element) -> str:
    names: list[str] = []
    node: etree._Element | None = el
    while node is not None and node is not root:
        names.append(str(node.tag))
        node = node.getparent()
    return "/".join(reversed(names))


def echoed_seqns(msg: SisMessage) -> set[int]:
    return {n for el in _elements(msg) if el.tag == "SEQN" and (n := _seqn((el.text or "").strip())) is not None}


def named_types(msg: SisMessage) -> set[str]:
    """Request types named anywhere in the message, META/STYP included."""
    texts = {(el.text or "").strip() for el in msg.root.iter() if isinstance(el.tag, str)}
    return texts & set(REQUEST_TYPES)


def error_text(msg: SisMessage) -> str:
    """``path=text`` of every element outside META that carries text (the error as the AODB put it)."""
    parts = []
    for el in _elements(msg):
        text = (el.text or "").strip()
        if text:
            parts.append(f"{_path(el, msg.root)}={text}")
    return ("; ".join(parts) or "EROR without error text")[:MAX_ERROR_TEXT]


def match(msg: SisMessage, inflight: Sequence[InFlight]) -> tuple[InFlight | None, str]:
    """The request this EROR answers and how it was matched, or (None, why not)."""
    echoes = echoed_seqns(msg)
    if echoes:
        hits = [r for r in inflight if r.seqn is not None and _seqn(r.seqn) in echoes]
        if len(hits) == 1:
            return hits[0], f"echoed SEQN {hits[0].seqn}"
        return None, f"echoed SEQN {sorted(echoes)} names {len(hits)} request(s) in flight"
    types = named_types(msg)
    if len(types) > 1:
        return None, f"the EROR names both {' and '.join(sorted(types))}"
    if types:
        (rtype,) = types
        hits = [r for r in inflight if r.rtype == rtype]
        if len(hits) == 1:
            return hits[0], f"type {rtype}"
        return None, f"{len(hits)} {rtype} request(s) in flight"
    if len(inflight) == 1:
        return inflight[0], "the only request in flight"
    return None, f"the EROR names no request type and {len(inflight)} request(s) are in flight"


def decide(msg: SisMessage, ctx: ErorContext) -> Decision:
    """FAILED for the matched request (the EROR SUCCEEDED), or SKIPPED(no_request); both alert."""
    error = error_text(msg)
    request, how = match(msg, ctx.inflight)
    if request is None:
        return Decision.skip("no_request", f"EROR matches no request in flight: {how}; error: {error}",
                             alert=f"EROR {msg.meta.identity} matches no request in flight ({how}): {error}")
    return Decision.apply(plans=(RequestFailure(request.req_id, error),),
                          alert=f"request {request.req_id} {request.rtype}/{request.styp} FAILED by EROR "
                                f"{msg.meta.identity} (matched by {how}): {error}")
