"""``POST /schd/sync`` (US-08 AC6, C-33): validate the window; registering an RQFD is pluggable.

Accepted time format (24-hour clock, airport local time, no zone): ``YYYY-MM-DD HH:MM:SS`` or
``YYYY-MM-DD HH:MM`` (a ``T`` may replace the space). The legacy 12-hour form (``hh`` plus AM/PM)
is refused: it is ambiguous at noon and midnight, which is why the spec asks for 24 hours. The
window lies within one day and in the years 2000-2099 (D23, a RESP's day: one RQFD per day; SIS years have two
digits), checked by the same ``sis.requests.rqfd_day`` that registration applies.

The registrar is passed to ``create_app(schd_sync=...)``: ``msgx serve`` wires request tracking's
(``http.server.RqfdSyncRegistrar``). Without one the endpoint validates and answers 501, so a
caller can never mistake "accepted" for "registered" (C-24/C-33: the promise ends at the mailbox).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from msgx_engine.http.errors import ApiError
from msgx_engine.sis.requests import RequestInvalid, rqfd_day

TIME_FORMAT_DOC = "YYYY-MM-DD HH:MM[:SS], 24-hour clock, airport local time (a 'T' may replace the space)"
_TIME_RE = re.compile(r"^(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2})(:\d{2})?$")
FIELDS = ("startDate", "endDate")


@dataclass(frozen=True)
class SyncWindow:
    start: datetime
    end: datetime


class SyncRegistrar(Protocol):
    """Registers one RQFD for the window; returns the JSON ``body`` of the success answer
    (e.g. ``{"request_id": 12, "state": "REGISTERED"}``), which must say registered or sent."""

    def register(self, window: SyncWindow) -> object: ...


def parse_time(name: str, value: object) -> datetime:
    if not isinstance(value, str) or not value.strip():
        raise ApiError("invalid_field", f"{name} is required and must be a non-empty string ({TIME_FORMAT_DOC})")
    m = _TIME_RE.match(value.strip())
    if m is None:
        raise ApiError("invalid_field", f"{name}={value!r} is not {TIME_FORMAT_DOC}")
    try:
        return datetime.strptime(f"{m[1]} {m[2]}{m[3] or ':00'}", "%Y-%m-%d %H:%M:%S")
    except ValueError as exc:
        raise ApiError("invalid_field", f"{name}={value!r} is not a valid time: {exc}") from None


def parse_window(doc: object) -> SyncWindow:
    """The validated window, or ApiError(invalid_json | invalid_field | invalid_range). Pure."""
    if not isinstance(doc, dict):
        raise ApiError("invalid_json", 'body must be a JSON object {"startDate": ..., "endDate": ...}')
    start, end = (parse_time(name, doc.get(name)) for name in FIELDS)
    if start > end:
        raise ApiError("invalid_range", f"startDate {start:%Y-%m-%d %H:%M:%S} is later than endDate "
                                        f"{end:%Y-%m-%d %H:%M:%S}")
    try:
        rqfd_day(start, end)          # the rule registration applies: one day, years 2000-2099 (D23)
    except RequestInvalid as exc:
        raise ApiError("invalid_range", str(exc)) from None
    return SyncWindow(start, end)
