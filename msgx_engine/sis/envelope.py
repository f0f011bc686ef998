"""The formats of the envelope fields: META and every FLID (SIS interface §2 and §3.16.2).

One rule table read by both doors: the decoder refuses a message whose META or FLID breaks it
(DEAD(malformed) before any identity is bound, so an oversized SEQN or FLID never reaches an
index or stalls the queue), and ``POST /cminmsgs/send`` refuses the same body with 400
``invalid_field``. Every problem names the field.

- SNDR: 1-16 characters, none of them whitespace or a control character;
- SEQN: 1-6 ASCII digits, 1..999999 (the sender's six-digit counter);
- TYPE, STYP: 3-4 ASCII letters (``ADD``, ``DEL``, ``UPD`` are three letters in the AODB samples);
- DTTM: 14 ASCII digits that form a real local time (yyyyMMddHHmmss);
- FLID, wherever one is present: 1-12 ASCII letters or digits. The AODB assigns digits
  (Number(1-12)); the spec's own examples and this repository's tests write readable FLIDs such
  as ``CA100``, so letters pass and the bound that protects keys and indexes is the length.

Pure: text in, a problem (or None) out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from lxml import etree

from msgx_engine.sis.times import dttm_local

META_FIELDS = ("SNDR", "SEQN", "DTTM", "TYPE", "STYP")
SNDR_MAX = 16
FLID_MAX = 12
SHOWN_CHARS = 40                 # a problem quotes at most this much of the offending value

_SNDR_RE = re.compile(rf"[^\s\x00-\x1f\x7f]{{1,{SNDR_MAX}}}")
_SEQN_RE = re.compile(r"[0-9]{1,6}")
_CODE_RE = re.compile(r"[A-Za-z]{3,4}")
_DTTM_RE = re.compile(r"[0-9]{14}")
_FLID_RE = re.compile(rf"[0-9A-Za-z]{{1,{FLID_MAX}}}")


def shown(value: str) -> str:
    """The value as a problem quotes it: its repr, cut to a readable length, with its length."""
    if len(value) <= SHOWN_CHARS:
        return repr(value)
    return f"{value[:SHOWN_CHARS]!r}... ({len(value)} characters)"


def field_problem(name: str, value: str) -> str | None:
    """Why the META ``name`` (or FLID) value ``value`` breaks its format, or None."""
    if name == "SNDR" and not _SNDR_RE.fullmatch(value):
        return f"META SNDR {shown(value)} must be 1-{SNDR_MAX} characters without spaces or control characters"
    if name == "SEQN" and not (_SEQN_RE.fullmatch(value) and int(value) >= 1):
        return f"META SEQN {shown(value)} must be 1-6 digits, 1..999999"
    if name in ("TYPE", "STYP") and not _CODE_RE.fullmatch(value):
        return f"META {name} {shown(value)} must be 3-4 letters"
    if name == "DTTM" and not (_DTTM_RE.fullmatch(value) and dttm_local(value) is not None):
        return f"META DTTM {shown(value)} must be 14 digits forming a time (yyyyMMddHHmmss)"
    if name == "FLID" and not _FLID_RE.fullmatch(value):
        return f"FLID {shown(value)} must be 1-{FLID_MAX} letters or digits"
    return None


def meta_values(root: etree._Element) -> dict[str, str] | None:
    """The stripped text of each META field that is present, or None when there is no META."""
    meta = root.find("META")
    if meta is None:
        return None
    values = {}
    for name in META_FIELDS:
        el = meta.find(name)
        if el is not None and (el.text or "").strip():
            values[name] = (el.text or "").strip()
    return values


def meta_problem(values: Mapping[str, str]) -> str | None:
    """The first present META value that breaks its format, or None (absent fields are not judged)."""
    for name in META_FIELDS:
        if name in values:
            problem = field_problem(name, values[name])
            if problem is not None:
                return problem
    return None


def flid_problem(root: etree._Element) -> str | None:
    """The first non-empty FLID anywhere in the message that breaks its format, or None. An empty
    FLID is left to the structure checks and the handlers (a FLOP block needs one)."""
    for el in root.iter("FLID"):
        value = (el.text or "").strip()
        if value:
            problem = field_problem("FLID", value)
            if problem is not None:
                return problem
    return None


def envelope_problem(root: etree._Element) -> str | None:
    """What the HTTP door checks: the first present META value or FLID of a ``<MSG>`` that breaks
    its format. A missing META or field, or another root, stays the pipeline's to classify (US-02:
    the door's checks do not replace the business decoding)."""
    if root.tag != "MSG":
        return None
    values = meta_values(root)
    return (meta_problem(values) if values else None) or flid_problem(root)
