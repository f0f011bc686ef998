"""SIS time strings and the airport's local time zone, in one place (D4, a DNLD's day; D19, SIS time strings).

SIS times carry no zone: the AODB sends airport local time (Asia/Shanghai). They are stored raw
and parsed only where a feature needs them (the snapshot day rule, request matching), and the
requests msgx sends are written in the same local forms:

- ``DDMONYYHHMM`` (and the date-only ``DDMONYY``) for flight times and request windows;
- META ``DTTM`` as ``yyyyMMddHHmmss``.

Pure: no clock, no I/O.
"""

from __future__ import annotations

from datetime import date, datetime
from zoneinfo import ZoneInfo

LOCAL_TZ = ZoneInfo("Asia/Shanghai")
MONTHS: tuple[str, ...] = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_MONTH_NUMBER = {m: i for i, m in enumerate(MONTHS, start=1)}


# --- reading -------------------------------------------------------------------------------------
def sis_date(text: str) -> date | None:
    """The date of a DDMONYY or DDMONYYHHMM string (two-digit years are 20yy), or None."""
    if len(text) < 7:
        return None
    month = _MONTH_NUMBER.get(text[2:5].upper())
    if month is None or not text[:2].isdigit() or not text[5:7].isdigit():
        return None
    try:
        return date(2000 + int(text[5:7]), month, int(text[:2]))
    except ValueError:
        return None


def sis_datetime(text: str) -> datetime | None:
    """A DDMONYYHHMM string as a naive local datetime (minute precision), or None."""
    day = sis_date(text)
    if day is None or len(text) != 11 or not text[7:].isdigit():
        return None
    hour, minute = int(text[7:9]), int(text[9:11])
    if hour > 23 or minute > 59:
        return None
    return datetime(day.year, day.month, day.day, hour, minute)


def dttm_local(text: str) -> datetime | None:
    """META DTTM (yyyyMMddHHmmss, local time) as an aware datetime, or None when unreadable.

    Exactly 14 digits: ``strptime`` alone would read "2021012305" as a time of its own making."""
    if len(text) != 14 or not text.isdigit():
        return None
    try:
        return datetime.strptime(text, "%Y%m%d%H%M%S").replace(tzinfo=LOCAL_TZ)
    except ValueError:
        return None


# --- writing -------------------------------------------------------------------------------------
def local(moment: datetime) -> datetime:
    """``moment`` in airport local time; a naive value already is local (SIS carries no zone)."""
    return moment.astimezone(LOCAL_TZ).replace(tzinfo=None) if moment.tzinfo else moment


def sis_time(moment: datetime) -> str:
    """DDMONYYHHMM local time (catalogue §2), e.g. 2021-01-23 05:35 -> 23JAN210535."""
    t = local(moment)
    return f"{t.day:02d}{MONTHS[t.month - 1]}{t.year % 100:02d}{t.hour:02d}{t.minute:02d}"


def dttm(moment: datetime) -> str:
    """META DTTM: yyyyMMddHHmmss local time."""
    return local(moment).strftime("%Y%m%d%H%M%S")
