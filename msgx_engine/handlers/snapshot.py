"""Daily schedule snapshots (SCHD DNLD/RESP): the pure half of FS §3.3/§4.2 with DESIGN D1-D6.

Three pure steps, each testable without a database:

1. ``outline`` reads what the loader needs before touching the store (FLIDs, RECS, SODT dates) and
   checks the package (INV-19, D5). An invalid package is never loaded against.
2. ``decide`` extracts every flight's full state (D1), resolves the day D (D4) and the request a
   RESP answers (D16), and returns a Decision whose single effect carries everything the write
   needs. Validation failures are DEAD and write nothing.
3. ``plan_snapshot`` turns (package, current flight heads, old member list, message id) into what
   to write: the flights to take over, the flights to soft delete (D2) and the ones left to a later
   day (D3). It runs inside the effect because only the effect learns the mailbox id, and both the
   replay short-circuit and ``last_message_id`` need it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from types import MappingProxyType
from zoneinfo import ZoneInfo

from msgx_engine.handlers.changes import fields_from_values
from msgx_engine.handlers.decision import Decision, Effect
from msgx_engine.handlers.extract import Unmapped, block_values, text_of
from msgx_engine.sis.decode import SisMessage
from msgx_engine.state.model import FlightState, Value

MAX_FLIGHTS = 10_000
LOCAL_TZ = ZoneInfo("Asia/Shanghai")   # SIS times carry no zone; AODB sends local time (D4, D19)
_MONTHS = {m: i for i, m in enumerate(
    ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"), start=1)}


class PackageRejected(ValueError):
    """The package fails a whole-package check; ``reason`` is the DEAD reason (malformed|oversize)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


# --- time strings (D19: stored raw, parsed only for the day rule and request matching) ---------
def sis_date(text: str) -> date | None:
    """The date of a DDMONYY or DDMONYYHHMM string (two-digit years are 20yy), or None."""
    if len(text) < 7:
        return None
    month = _MONTHS.get(text[2:5].upper())
    if month is None or not text[:2].isdigit() or not text[5:7].isdigit():
        return None
    try:
        return date(2000 + int(text[5:7]), month, int(text[:2]))
    except ValueError:
        return None


def dttm_local(text: str) -> datetime | None:
    """META DTTM (yyyyMMddHHmmss, local time) as an aware datetime, or None when unreadable.

    Exactly 14 digits: ``strptime`` alone would read "2021012305" as a time of its own making."""
    if len(text) != 14 or not text.isdigit():
        return None
    try:
        return datetime.strptime(text, "%Y%m%d%H%M%S").replace(tzinfo=LOCAL_TZ)
    except ValueError:
        return None


# --- step 1: outline and whole-package checks ---------------------------------------------------
@dataclass(frozen=True)
class Outline:
    """What the loader needs: the package's FLIDs in order and the day a DNLD covers (D4)."""

    flids: tuple[str, ...]
    day: date | None          # DNLD day (majority SODT date, or META DTTM date when empty)


def outline(msg: SisMessage) -> Outline:
    """Check RECS, FLID presence and uniqueness and the size limit; raise PackageRejected.

    The size check comes first so an oversize package costs one ``findall`` and nothing more.
    """
    container = msg.root.find("SCHD")
    assert container is not None  # decode() guarantees the container (DESIGN §2 step 3)
    records = container.findall("FLTR")
    for child in container:
        if isinstance(child.tag, str) and child.tag not in ("RECS", "FLTR"):
            raise PackageRejected("malformed", f"SCHD/{child.tag} is not part of a daily schedule")
    if len(records) > MAX_FLIGHTS:
        raise PackageRejected("oversize", f"{len(records)} flights exceed the limit of {MAX_FLIGHTS}")
    recs = text_of(container.find("RECS"))
    if not recs.isdigit():
        raise PackageRejected("malformed", f"SCHD/RECS is {recs!r}, expected the record count")
    if int(recs) != len(records):
        raise PackageRejected("malformed", f"RECS={int(recs)} but {len(records)} FLTR present")
    flids: list[str] = []
    seen: set[str] = set()
    sodt_days: list[date] = []
    for index, record in enumerate(records, start=1):
        flid = text_of(record.find("FLID"))
        if not flid:
            raise PackageRejected("malformed", f"FLTR #{index} has no FLID")
        if flid in seen:
            raise PackageRejected("malformed", f"FLID {flid} appears more than once")
        seen.add(flid)
        flids.append(flid)
        day = sis_date(text_of(record.find("SODT")))
        if day is not None:
            sodt_days.append(day)
    return Outline(tuple(flids), _dnld_day(msg, flids, sodt_days))


def _dnld_day(msg: SisMessage, flids: Sequence[str], sodt_days: Sequence[date]) -> date | None:
    """D4: the date most SODT values fall on (ties: the earliest); empty package: META DTTM."""
    if not flids:
        stamp = dttm_local(msg.meta.dttm)
        return stamp.date() if stamp else None
    if not sodt_days:
        return None
    counts = Counter(sodt_days)
    return min(counts, key=lambda d: (-counts[d], d))


# --- step 2: full states and the decision ---------------------------------------------------------
Fields = Mapping[str, Value]


def snapshot_fields(values: Mapping[str, object]) -> Fields:
    """A FLTR's values as a whole state (D1): present keys hold their value, everything else is
    absent, i.e. cleared. Equal to ``apply(any_state, full_state_commands(fields)).state.fields``."""
    return MappingProxyType(dict(sorted(fields_from_values(values).items())))


def package_flights(msg: SisMessage) -> tuple[tuple[str, Fields], ...]:
    """(FLID, full state fields) for every FLTR in input order; raises Unmapped on unknown content."""
    container = msg.root.find("SCHD")
    assert container is not None
    return tuple((text_of(r.find("FLID")), snapshot_fields(block_values(r))) for r in container.findall("FLTR"))


@dataclass(frozen=True)
class Head:
    """The bookkeeping part of a stored flight: all a snapshot needs, since it rewrites the fields."""

    flid: str
    fday: date | None
    state_version: int
    deleted: bool
    ffid: str | None = None


@dataclass(frozen=True)
class Ledger:
    """``schd_gen`` row of a day as read under the writer lock (None fields: no snapshot yet)."""

    day: date
    version: int | None
    last_message_id: int | None
    members: frozenset[str]


@dataclass(frozen=True)
class OpenRequest:
    """The open (SENT) RQFD a RESP may answer (D16)."""

    req_id: int
    fday: date | None
    sent_at: datetime | None


@dataclass(frozen=True)
class SnapshotInput:
    """Everything the snapshot write needs; built purely by ``decide``, applied by the effect."""

    styp: str
    day: date
    flights: tuple[tuple[str, Fields], ...]
    ledger: Ledger
    heads: Mapping[str, Head]
    request: OpenRequest | None


# The router injects the store's effect constructor, so this module imports no I/O code.
EffectFactory = Callable[[SnapshotInput], Effect]

OUTLINE, OUTLINE_ERROR, LEDGER, HEADS, REQUEST = "outline", "outline_error", "ledger", "heads", "request"


def decide(msg: SisMessage, extra: Mapping[str, object], make_effect: EffectFactory) -> Decision:
    """The snapshot decision from the loader's ``extra`` (see ``store.ledger.load_snapshot``)."""
    error = extra.get(OUTLINE_ERROR)
    if isinstance(error, PackageRejected):
        return Decision.dead(error.reason, error.detail)
    pkg = extra[OUTLINE]
    assert isinstance(pkg, Outline)
    request = extra.get(REQUEST)
    assert request is None or isinstance(request, OpenRequest)
    if msg.meta.styp == "RESP":
        skip = _unanswerable(msg, request)
        if skip:
            return Decision.skip("no_request", skip)
    try:
        flights = package_flights(msg)
    except Unmapped as exc:
        return Decision.dead("malformed", str(exc))
    ledger = extra.get(LEDGER)
    if not isinstance(ledger, Ledger):
        return Decision.dead("malformed", "the snapshot day cannot be determined: no FLTR carries a readable "
                                          "SODT (an empty package needs a readable META DTTM)")
    heads = extra[HEADS]
    assert isinstance(heads, Mapping)
    return Decision.apply(effects=(make_effect(SnapshotInput(
        styp=msg.meta.styp, day=ledger.day, flights=flights, ledger=ledger, heads=heads,
        request=request if msg.meta.styp == "RESP" else None)),))


def _unanswerable(msg: SisMessage, request: OpenRequest | None) -> str | None:
    """Why a RESP cannot be taken (US-06 AC2, D16), or None when it answers ``request``."""
    if request is None:
        return "no open (SENT) RQFD request to answer"
    if request.fday is None:
        return f"open RQFD request {request.req_id} names no day"
    return answered_too_early(msg, request)


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


# --- step 3: the plan -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """What one accepted snapshot writes (FS §3.3 steps 3-5)."""

    day: date
    written: tuple[FlightState, ...]      # taken over: full state, fday = D, not deleted
    deleted: tuple[str, ...]              # (old - new) ∩ fday = D, not yet deleted: soft delete (D2)
    kept_later: tuple[str, ...]           # in the package but owned by a later day: left as is (D3)
    members: frozenset[str]               # the day's new member list (the whole package)


def plan_snapshot(inp: SnapshotInput, msg_id: int) -> Plan:
    """Pure merge and diff of one snapshot against the current heads and the old member list."""
    day = inp.day
    written: list[FlightState] = []
    kept_later: list[str] = []
    for flid, fields in inp.flights:
        head = inp.heads.get(flid)
        if head is not None and head.fday is not None and head.fday > day:
            kept_later.append(flid)
            continue
        if head is not None and head.ffid and "FFID" not in fields:
            fields = _with_ffid(fields, head.ffid)
        written.append(FlightState(flid=flid, fields=fields, fday=day,
                                   state_version=(head.state_version if head else 0) + 1,
                                   last_message_id=msg_id, deleted=False))
    members = frozenset(flid for flid, _ in inp.flights)
    deleted = sorted(flid for flid in inp.ledger.members - members
                     if _deletable(inp.heads.get(flid), day))
    return Plan(day, tuple(written), tuple(deleted), tuple(kept_later), members)


def _with_ffid(fields: Fields, ffid: str) -> Fields:
    """FLTR records carry no FFID: the stored readable identity stays, as ADFT keeps it."""
    return MappingProxyType(dict(sorted({**fields, "FFID": ffid}.items())))


def _deletable(head: Head | None, day: date) -> bool:
    """Only a live flight still owned by this day is diff-deleted (FS §3.3 constraint 2)."""
    return head is not None and head.fday == day and not head.deleted


def flids_to_read(pkg: Outline, members: Iterable[str]) -> list[str]:
    """Heads the snapshot needs: its own flights and the old members (diff-delete candidates)."""
    return sorted(set(pkg.flids) | set(members))
