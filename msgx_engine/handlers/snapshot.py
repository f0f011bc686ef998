"""Daily schedule snapshots (SCHD DNLD/RESP): the pure half of FS §3.3/§4.2 with DESIGN D1-D6
(D1, omitted fields cleared; D2, soft delete; D3, a flight's day; D4, a DNLD's day; D5, snapshot package checks; D6,
snapshot vs updates).

Three pure steps, each testable without a database:

1. ``outline`` reads what the loader needs before touching the store (FLIDs, RECS, SODT dates) and
   checks the package (INV-19, D5, snapshot package checks). An invalid package is never loaded against.
2. ``decide`` takes the ``SnapshotContext`` the route loaded (the outline, the day's ledger, the
   heads of every flight involved, the open RQFD a RESP answers, and the mailbox id), extracts
   every flight's full state (D1, omitted fields cleared) and returns a Decision carrying the whole ``SnapshotPlan``
   (and the request completion of a RESP). Validation failures are DEAD and write nothing.
3. ``plan_snapshot`` turns (package, current flight heads, old member list, message id) into what
   to write: the flights to take over, the flights to soft delete (D2) with the live code-share
   children of deleted masters (D30, code-share cascade), and the ones left to a later day (D3, a flight's day). Every
   written flight carries its derived MAFL (D30: never the package's); masters outside the package whose children
   the snapshot changed get a MAFL change of their own (``outside_masters``). The store
   (``store.ledger.write_snapshot``) only writes the plan.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime, time
from types import MappingProxyType

from lxml import etree

from msgx_engine.handlers import codeshare
from msgx_engine.handlers.answers import (
    LATE_ANSWER,
    NO_REQUEST,
    AnswerRefusal,
    OpenRequest,
    RequestCompletion,
    answered_too_early,
    select_request,
)
from msgx_engine.handlers.decision import Decision, FlightChange, Plan
from msgx_engine.handlers.extract import Unmapped, text_of
from msgx_engine.handlers.whole_record import whole_record_fields, whole_state
from msgx_engine.sis.decode import SisMessage
from msgx_engine.sis.times import dttm_local, sis_date, sis_datetime
from msgx_engine.state.model import (
    BASE,
    DELETED,
    FlightState,
    Replace,
    Stamps,
    Value,
    apply,
    full_state_commands,
    stamp_of,
)

log = logging.getLogger(__name__)

MAX_FLIGHTS = 10_000


class PackageRejected(ValueError):
    """The package fails a whole-package check; ``reason`` is the DEAD reason (malformed|oversize)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


# --- step 1: outline and whole-package checks ---------------------------------------------------
@dataclass(frozen=True)
class Outline:
    """What the loader needs: the package's FLIDs in order and the day a DNLD covers (D4, a DNLD's day)."""

    flids: tuple[str, ...]
    day: date | None          # the package's day (D4: majority SODT date); None when empty or unreadable
    maids: frozenset[str] = frozenset()   # the masters the package's children name (D30)


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
    maids: set[str] = set()
    days: dict[str, date | None] = {}
    for index, record in enumerate(records, start=1):
        first: dict[str, etree._Element] = {}         # the first FLID, SODT and MAID, in one pass
        for child in record.iterchildren("FLID", "SODT", "MAID"):
            first.setdefault(child.tag, child)
        flid = text_of(first.get("FLID"))
        if not flid:
            raise PackageRejected("malformed", f"FLTR #{index} has no FLID")
        if flid in seen:
            raise PackageRejected("malformed", f"FLID {flid} appears more than once")
        seen.add(flid)
        flids.append(flid)
        day = _sodt_day(text_of(first.get("SODT")), days)
        if day is not None:
            sodt_days.append(day)
        maid = text_of(first.get("MAID"))
        if maid:
            maids.add(maid)
    return Outline(tuple(flids), package_day(sodt_days), frozenset(maids))


def _sodt_day(sodt: str, days: dict[str, date | None]) -> date | None:
    """``sis_date(sodt)``, which reads no more than a text's first 7 characters (DDMONYY), parsed once
    per distinct 7 (``days``): a package's 10,000 SODTs fall on a day or two."""
    if len(sodt) < 7:
        return None
    key = sodt[:7]
    if key not in days:
        days[key] = sis_date(key)
    return days[key]


def package_day(sodt_days: Sequence[date]) -> date | None:
    """D4: the date most SODT values fall on (ties: the earliest, S1, SODT tie). An empty package has no day
    (D4 revised: the META DTTM date let a 22:00 DNLD for tomorrow wipe today); so has one whose
    SODTs are all unreadable (S2, DNLD without SODT)."""
    if not sodt_days:
        return None
    counts = Counter(sodt_days)
    return min(counts, key=lambda d: (-counts[d], d))


# --- step 2: full states and the decision ---------------------------------------------------------
Fields = Mapping[str, Value]


def snapshot_fields(values: Mapping[str, object]) -> Fields:
    """A FLTR's values as a whole state (D1): present keys hold their value, everything else is
    absent, i.e. cleared. Equal to ``apply(any_state, full_state_commands(fields)).state.fields``.
    Derived fields (MAFL) are not taken from the package: ``plan_snapshot`` derives them (D30)."""
    return whole_state(values)


Flights = tuple[tuple[str, Fields], ...]


def package_records(root: etree._Element) -> list[etree._Element]:
    """A daily schedule's FLTR records, in input order (``decode`` guarantees the container)."""
    container = root.find("SCHD")
    assert container is not None
    return container.findall("FLTR")


def package_flights(msg: SisMessage, flids: Sequence[str] | None = None) -> Flights:
    """(FLID, full state fields) for every FLTR in input order; raises Unmapped on unknown content.
    ``flids``: the outline's, read from the same records in the same order (not read again)."""
    records = package_records(msg.root)
    return tuple(records_flights(records, flids))


def records_flights(records: Sequence[etree._Element], flids: Sequence[str] | None = None, *,
                    frozen: bool = True) -> list[tuple[str, Fields]]:
    """(FLID, whole-state fields) of each record (``flids``: theirs, when already read); with
    ``frozen=False`` as plain data ``marshal`` writes. Raises Unmapped at the first bad record."""
    if flids is None:
        flids = [_child_text(r, "FLID") for r in records]
    return [(flid, whole_record_fields(r, frozen=frozen)) for flid, r in zip(flids, records, strict=True)]


def _child_text(record: etree._Element, tag: str) -> str:
    """``text_of(record.find(tag))`` for a plain tag: the first such child's stripped text. lxml
    matches the tag in C here, where ``find`` goes through its path language: 40,000 lookups
    for a 10,000-flight package."""
    return text_of(next(record.iterchildren(tag), None))


@dataclass(frozen=True)
class Head:
    """The bookkeeping part of a stored flight: all a snapshot needs, since it rewrites the fields."""

    flid: str
    fday: date | None
    state_version: int
    deleted: bool
    ffid: str | None = None
    maid: str | None = None          # code-share: the master it points at, and what it adds to
    alcd: str | None = None          # that master's MAFL (D30)
    flno: str | None = None
    sodt: str | None = None          # a RESP deletes only members whose SODT lies in its window (D23, a RESP's day)
    stamps: Stamps = field(default_factory=lambda: MappingProxyType({}))   # last writer per key (F6, last writer wins)

    @property
    def newest(self) -> int:
        """The largest mailbox id that wrote this flight (0: none known)."""
        return max(self.stamps.values(), default=0)

    def codeshare_state(self) -> FlightState:
        """The part of the stored state the code-share rules read (D30)."""
        parts = {k: v for k, v in (("MAID", self.maid), ("ALCD", self.alcd), ("FLNO", self.flno)) if v}
        return FlightState(self.flid, MappingProxyType(parts), deleted=self.deleted)


@dataclass(frozen=True)
class Ledger:
    """``schd_gen`` row of a day as read under the writer lock (None fields: no snapshot yet)."""

    day: date
    version: int | None
    last_message_id: int | None
    members: frozenset[str]


@dataclass(frozen=True)
class SnapshotInput:
    """The package against the state it meets: the input of ``plan_snapshot``."""

    styp: str
    day: date
    flights: tuple[tuple[str, Fields], ...]
    ledger: Ledger
    heads: Mapping[str, Head]
    request: OpenRequest | None
    children: codeshare.Children = field(default_factory=dict)
    window: tuple[datetime, datetime] | None = None     # a RESP's request window (D23); None: the day
    newer: Mapping[str, FlightState] = field(default_factory=dict)   # see SnapshotContext.newer
    floors: Mapping[str, int] = field(default_factory=dict)          # see SnapshotContext.floors


@dataclass(frozen=True)
class SnapshotContext:
    """What the route loads for a SCHD DNLD/RESP under the writer lock (``pipeline.routing``).

    ``rejected`` is set when the package failed its whole-package checks (nothing else is read);
    ``ledger`` is None when the day cannot be determined. A RESP's ``request`` is the RQFD it
    answers (``answered_request``), ``refusal`` why it answers none when that is known (a late
    answer, an echo naming no request), ``sent`` every SENT RQFD (to say why none matched).
    ``children`` holds the live code-share children of every flight the snapshot writes, may
    delete, or whose child it changes (D30).
    """

    msg_id: int
    outline: Outline | None = None
    rejected: PackageRejected | None = None
    request: OpenRequest | None = None
    sent: tuple[OpenRequest, ...] = ()
    ledger: Ledger | None = None
    refusal: AnswerRefusal | None = None
    heads: Mapping[str, Head] = field(default_factory=dict)
    children: codeshare.Children = field(default_factory=dict)
    # the whole states of the package's flights that a message newer than this snapshot already
    # wrote (their head's newest stamp is larger): merged key by key, last writer wins (F6)
    newer: Mapping[str, FlightState] = field(default_factory=dict)
    # the package's flights as ``package_flights`` gives them, when the pipeline read them already
    # (a large package, read on two cores); None: ``decide`` reads them
    flights: Flights | None = None
    # the versions another installation published for package flights not stored here: such a
    # flight starts one above (decision O19, version floor)
    floors: Mapping[str, int] = field(default_factory=dict)


def decide(msg: SisMessage, ctx: SnapshotContext) -> Decision:
    """The snapshot decision: DEAD, SKIPPED(no_request | late_answer | empty_snapshot), or the whole
    plan (and a RESP's request completion). A message that is already the day's last one plans
    nothing (replay short-circuit)."""
    if ctx.rejected is not None:
        return Decision.dead(ctx.rejected.reason, ctx.rejected.detail)
    pkg = ctx.outline
    assert pkg is not None
    resp = msg.meta.styp == "RESP"
    if resp and dttm_local(msg.meta.dttm) is None:
        return Decision.dead("malformed", f"RESP META DTTM {msg.meta.dttm!r} is not a readable time: the answer "
                                          "cannot be matched to a request (C-23)")
    if pkg.flids and pkg.day is None:
        return Decision.dead("malformed", "the snapshot day cannot be determined: no FLTR carries a readable SODT")
    if not resp and not pkg.flids:
        return Decision.skip("empty_snapshot", "a DNLD without flights has no day: nothing deleted (D4)",
                             alert="empty SCHD DNLD: no day, nothing deleted; the AODB sent an empty daily schedule")
    if resp and ctx.refusal is not None:
        return _refused(msg, ctx.refusal)
    if resp:
        skip = _unanswerable(msg, pkg, ctx.request, ctx.sent)
        if skip:
            return Decision.skip(NO_REQUEST, skip)
    try:
        flights = ctx.flights if ctx.flights is not None else package_flights(msg, pkg.flids)
    except Unmapped as exc:
        return Decision.dead("malformed", str(exc))
    assert ctx.ledger is not None
    if ctx.ledger.last_message_id == ctx.msg_id:
        log.info("snapshot %s for %s is the day's last message: replay short-circuit", ctx.msg_id, ctx.ledger.day)
        return Decision.apply()
    request = ctx.request if resp else None
    last = ctx.ledger.last_message_id
    if last is not None and ctx.msg_id < last:
        return Decision.skip("superseded", f"the snapshot of {ctx.ledger.day} from mailbox id {last} is newer: this "
                                           "older one, committed late, would rewind the day (F6)")
    inp = SnapshotInput(styp=msg.meta.styp, day=ctx.ledger.day, flights=flights, ledger=ctx.ledger,
                        heads=ctx.heads, request=request, children=ctx.children,
                        window=request_window(request, ctx.ledger.day) if request else None, newer=ctx.newer,
                        floors=ctx.floors)
    plan = plan_snapshot(inp, ctx.msg_id)
    completion = (RequestCompletion(request.req_id),) if request is not None else ()
    return Decision.apply(*outside_masters(inp, plan), plans=(plan, *completion), alert=_held_alert(plan))


def _held_alert(plan: SnapshotPlan) -> str | None:
    """What the operator hears when the package drops a master but keeps its code-share child."""
    if not plan.held:
        return None
    pairs = "; ".join(f"master {m} kept for {', '.join(c)}" for m, c in plan.held)
    return (f"the daily schedule of {plan.day} leaves out code-share master flight(s) whose code-share "
            f"flights it still lists: the masters stay live until a schedule drops their code-share "
            f"flights too ({pairs})")


def answered_request(msg: SisMessage, pkg: Outline, candidates: Sequence[OpenRequest], received_at: datetime | None
                     ) -> tuple[OpenRequest | None, AnswerRefusal | None]:
    """The RQFD a RESP answers (D23, C-23, ``answers.select_request``): the one its echoed SEQN
    names, else the one of the package's own day (D4's rule on its FLTRs) in flight when the
    answer was registered; an empty RESP answers the RQFD in flight unless it may be the late
    answer to a timed-out request of another day (decision L15, empty RESP without echo). Late: refused."""
    return select_request(msg, "RQFD", candidates, received_at,
                          fits=lambda r: not pkg.flids or (r.fday is not None and r.fday == pkg.day),
                          dayless=not pkg.flids)


def _refused(msg: SisMessage, refusal: AnswerRefusal) -> Decision:
    """A RESP that answers no request in time: SKIPPED with its reason, an alert for a late one
    and for an empty one that may answer another day's request (L15)."""
    if refusal.reason != LATE_ANSWER and not refusal.alert:
        return Decision.skip(refusal.reason, refusal.detail)
    late = "late " if refusal.reason == LATE_ANSWER else ""
    return Decision.skip(refusal.reason, refusal.detail,
                         alert=f"{late}SCHD RESP {msg.meta.identity} not applied: {refusal.detail}")


def _unanswerable(msg: SisMessage, pkg: Outline, request: OpenRequest | None,
                  sent: Sequence[OpenRequest]) -> str | None:
    """Why a RESP cannot be taken (US-06 AC2, C-23, D23), or None when it answers ``request``."""
    if request is None:
        if not sent:
            return "no open (SENT) RQFD request to answer"
        asked = ", ".join(f"request {r.req_id} for {r.fday}" for r in sent)
        if not pkg.flids:
            return f"an empty RESP answers the RQFD in flight when it was registered, and none was ({asked})"
        return f"the package covers {pkg.day}, no RQFD in flight asks for that day ({asked}): a stray answer"
    return answered_too_early(msg, request)


def request_window(request: OpenRequest, day: date) -> tuple[datetime, datetime]:
    """The local window an RQFD asked for (STDB..STDE, minutes, inclusive); an omitted or
    unreadable bound is that end of the day (D23)."""
    start = sis_datetime(request.start_text or "") or datetime.combine(day, time.min)
    end = sis_datetime(request.end_text or "") or datetime.combine(day, time(23, 59))
    return start, end


# --- step 3: the plan -----------------------------------------------------------------------------
@dataclass(frozen=True)
class SnapshotPlan(Plan):
    """What one accepted snapshot writes (FS §3.3 steps 3-6), computed whole by the handler."""

    styp: str
    ledger: Ledger                        # the day's ledger as read under the lock (version CAS)
    written: tuple[FlightState, ...]      # taken over: full state, fday = D, not deleted
    deleted: tuple[str, ...]              # (old - new) ∩ fday = D (∩ window, D23), live: soft delete (D2),
                                          # then the live children of deleted masters (D30)
    kept_later: tuple[str, ...]           # in the package but owned by a later day: left as is (D3)
    members: frozenset[str]               # the day's new member list (the package, and for a RESP the
                                          # old members outside its window, D23)
    flights: int                          # FLTR records in the package (the run record)
    req_id: int | None = None             # the RQFD a RESP answers (the run record)
    held: tuple[tuple[str, tuple[str, ...]], ...] = ()   # masters kept for their live children
                                          # that stay, with those children (decision L5, master kept for a live child)
    unstored: frozenset[str] = frozenset()   # written flights with no stored row (no head): the
                                          # writer deletes no detail rows of theirs (P21, output floor and writer
                                          # savings, decision C2, unstored flights)

    @property
    def day(self) -> date:
        return self.ledger.day


def plan_snapshot(inp: SnapshotInput, msg_id: int) -> SnapshotPlan:
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
            fields = _with(fields, "FFID", head.ffid)
        current = inp.newer.get(flid)
        if current is not None:     # a newer message wrote some of it first: those keys stay (F6)
            written.append(apply(current, full_state_commands(fields), message_id=msg_id, fday=day,
                                 undelete=True).state)
            continue
        written.append(FlightState(flid=flid, fields=fields, fday=day,
                                   state_version=(head.state_version if head else inp.floors.get(flid, 0)) + 1,
                                   last_message_id=msg_id, deleted=False,
                                   stamps=MappingProxyType({BASE: msg_id, DELETED: msg_id})))
    package = frozenset(flid for flid, _ in inp.flights)
    # D23: a RESP only speaks for its request's window; members outside it stay as they are
    outside = {f for f in inp.ledger.members - package if not _in_window(inp.heads.get(f), inp.window)}
    # L8, ADFT restore and member list: a member a newer message restored is spared (F6) and stays a member, as it would
    # be in id order (the restore puts it back), so the day's next package can still diff-delete it
    restored = {f for f in inp.ledger.members - package - outside if _restored_later(inp.heads.get(f), day, msg_id)}
    members = package | outside | restored
    diff = sorted(flid for flid in inp.ledger.members - members
                  if _deletable(inp.heads.get(flid), day, msg_id))
    # L5: a master one of whose live children stays (the package lists it, or a later day or the
    # RESP's outside window keeps it) is not diff-deleted: it stays a live member, with an alert
    held = held_masters(diff, members, written, inp.children)
    if held:
        kept = {m for m, _ in held}
        diff = [f for f in diff if f not in kept]
        members = members | kept
    # D30: a deleted master takes its live children with it
    deleted = diff + sorted(set(codeshare.cascade(diff, inp.children)) - members - set(diff))
    after = _after(written, deleted)
    after_children = codeshare.children_after(after)
    written = [_with_mafl(s, codeshare.derived_mafl(s.flid, inp.children, after, after_children))
               if s.flid in inp.children else s for s in written]
    return SnapshotPlan(inp.styp, inp.ledger, tuple(written), tuple(deleted), tuple(kept_later), members,
                        len(inp.flights), inp.request.req_id if inp.request else None, held,
                        frozenset(s.flid for s in written if s.flid not in inp.heads))


def held_masters(diff: Iterable[str], members: frozenset[str], written: Iterable[FlightState],
                 children: codeshare.Children) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The diff-delete candidates that must stay because a live code-share child of theirs stays
    (decision L5, INV-21: never a live child of a deleted master), each with those children: a
    child the package writes naming it (``MAID``), or a stored live child the snapshot leaves as
    it is (in ``members`` but not written: owned by a later day, or outside a RESP's window)."""
    candidates = set(diff)
    if not candidates:
        return ()
    written_now = {s.flid: s for s in written}
    staying: dict[str, set[str]] = {}
    for state in written_now.values():
        master = codeshare.master_of(state)
        if master in candidates:
            staying.setdefault(master, set()).add(state.flid)
    for master in candidates:
        for ref in children.get(master, ()):
            if ref.flid in members and ref.flid not in written_now:
                staying.setdefault(master, set()).add(ref.flid)
    return tuple((m, tuple(sorted(c, key=codeshare.flid_order))) for m, c in sorted(staying.items()))


def _after(written: Iterable[FlightState], deleted: Iterable[str]) -> dict[str, FlightState]:
    """Every flight the snapshot writes or deletes, as it will be (a deleted one by its flag)."""
    return {**{s.flid: s for s in written}, **{f: FlightState(f, deleted=True) for f in deleted}}


def outside_masters(inp: SnapshotInput, plan: SnapshotPlan) -> list[FlightChange]:
    """MAFL changes for masters the snapshot does not write whose children it created, deleted or
    moved (D30); the pipeline loads them and drops the changes that change nothing."""
    after = _after(plan.written, plan.deleted)
    touched: set[str] = set()
    for flid, state in after.items():
        head = inp.heads.get(flid)
        touched |= codeshare.touched_masters(head.codeshare_state() if head else None, state)
    after_children = codeshare.children_after(after)
    return [FlightChange(flid=m, commands=(Replace(codeshare.MAFL,
                                                   codeshare.derived_mafl(m, inp.children, after, after_children)),),
                         create=False)
            for m in sorted(touched - set(after), key=codeshare.flid_order) if m in inp.children]


def _with_mafl(state: FlightState, mafl: Value) -> FlightState:
    """``state`` with its derived MAFL; the same object when that changes nothing (a flight with no
    children and no MAFL: nearly all of a package's 10,000)."""
    if mafl == () and codeshare.MAFL not in state.fields:
        return state
    return replace(state, fields=_with(state.fields, codeshare.MAFL, mafl))


def _with(fields: Fields, key: str, value: Value) -> Fields:
    """``fields`` with ``key`` set (an empty tuple removes it). FLTR records carry no FFID, so the
    stored readable identity is kept this way (S5, stored FFID kept); the derived MAFL is set this way (D30)."""
    merged = {**fields, key: value}
    if value == ():
        merged.pop(key)
    return MappingProxyType(dict(sorted(merged.items())))


def _in_window(head: Head | None, window: tuple[datetime, datetime] | None) -> bool:
    """Whether a member lies in the window the snapshot speaks for: a DNLD's is the whole day; a
    RESP's only its request's STDB..STDE, so a member with no readable SODT is outside it (D23)."""
    if window is None:
        return True
    sodt = sis_datetime(head.sodt or "") if head is not None else None
    return sodt is not None and window[0] <= sodt <= window[1]


def _deletable(head: Head | None, day: date, msg_id: int) -> bool:
    """Only a live flight still owned by this day is diff-deleted (FS §3.3 constraint 2), and not
    one a newer message restored (its deletion flag is stamped later: last writer wins, F6)."""
    return (head is not None and head.fday == day and not head.deleted
            and stamp_of(head.stamps, DELETED) <= msg_id)


def _restored_later(head: Head | None, day: date, msg_id: int) -> bool:
    """A live flight of this day whose deletion flag a newer message wrote (an ADFT, L8)."""
    return (head is not None and head.fday == day and not head.deleted
            and stamp_of(head.stamps, DELETED) > msg_id)


def flids_to_read(pkg: Outline, members: Iterable[str]) -> list[str]:
    """Heads the snapshot needs: its own flights and the old members (diff-delete candidates)."""
    return sorted(set(pkg.flids) | set(members))


def children_to_read(pkg: Outline, members: Iterable[str], heads: Mapping[str, Head]) -> list[str]:
    """Flights whose live code-share children the snapshot needs (D30): its own (their MAFL), the
    old members (a deleted master's cascade) and every master a package or member flight names."""
    masters = {h.maid for h in heads.values() if h.maid} | pkg.maids
    return sorted(set(pkg.flids) | set(members) | masters)
