"""Safe replay of failed messages (US-10): a preview first, then an audited re-queue.

An operator selects messages (ids, status, reason or error class, registration time; never
"everything") and sees, per message, its status, reason, attempts, error, its outbox events and
mailbox mark, and what replaying would do to each flight it touches: the flight's current
``state_version`` against the one the message saw, and whether later messages have changed the
flight since (see ``store.outbox.FlightTrail``).

What may be replayed (US-10 AC2, ``refusal``): FAILED messages (their retries are reset), DEAD
ones that died of exhausted retries (infrastructure faults, decoder or handler defects) or of a
vanished mailbox row, and SKIPPED(unsupported) once this version has a handler for the type.
Everything else (``malformed``, ``oversize``, duplicates, ...) is refused with its reason.

Applying is all or nothing, under the writer row lock: if any selected message is refused, or a
flight it touches has been changed by later messages (stale) and ``force_stale`` gives no reason,
nothing is re-queued and the command exits 2. Otherwise each message goes back to PENDING with
attempts and backoff reset (``store.queue_selection.requeue``); it keeps its registration time, identity
binding and error history, and its retry deadline counts from the re-queue. Every apply request,
refused or not, is one audit row with an item per message (``store.audit``), in the same
transaction as the re-queue.

Order: a re-queued message is open again, and the queue head is the smallest open id, so it runs
before every open message with a larger id, but after nothing: the messages with larger ids that
already ran are neither undone nor re-run (US-10 AC3). Its content is applied on top of the state
they left, which is why a stale flight blocks the apply until an operator accepts it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Connection, Engine

from msgx_engine.handlers import snapshot
from msgx_engine.handlers.adft import adft_flids
from msgx_engine.handlers.flop import flop_flids
from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.pipeline import routing
from msgx_engine.sis.decode import MAX_BODY_BYTES, SisMessage, SisRefused, decode
from msgx_engine.store import audit, ledger, locks, outbox, queue_selection
from msgx_engine.store.outbox import EventSummary, FlightTrail
from msgx_engine.store.queue_selection import QueueRow, Selection
from msgx_engine.store.status import REPLAYABLE_DEAD, Status

MAX_SELECTED = 1000          # a larger selection is refused: narrow it
DETAIL_CHARS = 200           # an error detail is shown (and logged) cut to this


def refusal(row: QueueRow, routable: bool | None) -> str | None:
    """Why ``row`` may not be replayed (None: it may). ``routable``: this version has a handler
    for the message's type (None: the body could not be read or decoded)."""
    if row.status == Status.FAILED:
        return None
    if row.status == Status.DEAD:
        return None if row.reason in REPLAYABLE_DEAD else f"refused: {row.reason or 'dead'}"
    if row.status == Status.SKIPPED and row.reason == "unsupported":
        return None if routable else "refused: unsupported (this version still has no handler for it)"
    what = f"{row.status}({row.reason})" if row.reason else str(row.status)
    return f"refused: {what} is not replayable"


def touched_flids(msg: SisMessage) -> list[str]:
    """The flights a message's handler would load (and may change)."""
    route = routing.route_for(msg)
    if route is None:
        return []
    if msg.meta.type == "SCHD" and msg.meta.styp in ("DNLD", "RESP"):
        try:
            return list(snapshot.outline(msg).flids)
        except snapshot.PackageRejected:
            return []
    if msg.meta.type == "SCHD" and msg.meta.styp == "ADFT":
        return adft_flids(msg)
    if msg.kind == "FLOP":
        return flop_flids(msg)
    return []


@dataclass(frozen=True)
class Decoded:
    """What the body tells: the flights it touches and whether this version can route it."""

    flids: tuple[str, ...] = ()
    routable: bool | None = None
    problem: str | None = None       # why the body could not be read or decoded


@dataclass(frozen=True)
class FlightImpact:
    flid: str
    current_version: int | None      # None: no such flight
    deleted: bool
    trail: FlightTrail

    @property
    def stale(self) -> bool:
        return self.trail.later_messages > 0

    def describe(self) -> str:
        if self.current_version is None:
            now = "absent (a replay may create it)"
        else:
            now = f"version now {self.current_version}{' (deleted)' if self.deleted else ''}"
        seen = f"the message saw version {self.trail.seen_version}"
        if self.stale:
            return (f"flight {self.flid}: {now}, {seen}; later messages have changed this flight since "
                    f"({self.trail.later_messages}, last mailbox id {self.trail.last_later_msg_id})")
        return f"flight {self.flid}: {now}, {seen}; unchanged by later messages"


@dataclass(frozen=True)
class ReplayItem:
    row: QueueRow
    decoded: Decoded
    events: EventSummary
    mark: str
    flights: tuple[FlightImpact, ...]
    refusal: str | None

    @property
    def applied(self) -> bool:
        """Its state was already applied: a replay redoes only the post-commit step and the
        terminal status (INV-20b), so later changes to its flights are not at risk."""
        return self.row.applied_at is not None

    @property
    def stale(self) -> tuple[FlightImpact, ...]:
        return () if self.applied else tuple(f for f in self.flights if f.stale)

    def verdict(self) -> str:
        if self.refusal:
            return self.refusal
        if self.stale:
            return f"replayable, but stale ({len(self.stale)} flight(s)): --apply needs --force-stale REASON"
        return "replayable"

    def as_json(self, max_flights: int = 20) -> dict[str, object]:
        r = self.row
        return {
            "msg_id": r.msg_id, "status": r.status, "reason": r.reason, "type": r.msg_type, "styp": r.msg_styp,
            "attempts": r.attempts, "error_class": r.error_class, "error": short(r.error_detail),
            "events": vars(self.events), "mark": self.mark, "applied": self.applied,
            "flights": len(self.flights), "stale_flights": [f.flid for f in self.stale][:max_flights],
            "verdict": self.verdict()}

    def lines(self, max_flights: int = 20) -> list[str]:
        r = self.row
        head = f"{r.status}({r.reason})" if r.reason else str(r.status)
        kind = f"{r.msg_type}/{r.msg_styp}" if r.msg_type else "type unknown"
        out = [f"mailbox id {r.msg_id}: {head} {kind}, attempts {r.attempts}",
               f"  error: {r.error_class or '-'}: {short(r.error_detail) or '-'}",
               f"  registered {r.created_at:%Y-%m-%d %H:%M:%S%z}"
               + (f", last re-queued {r.requeued_at:%Y-%m-%d %H:%M:%S%z}" if r.requeued_at else ""),
               f"  events: {self.events.total} (released {self.events.released}, sent {self.events.sent}, "
               f"dead {self.events.dead})",
               f"  mark: {self.mark}"]
        if self.decoded.problem:
            out.append(f"  body: {self.decoded.problem}")
        if self.applied:
            out.append("  state already applied: a replay redoes only the post-commit step and the terminal status")
        shown = sorted(self.flights, key=lambda f: (not f.stale, f.flid))[:max_flights]
        out += [f"  {f.describe()}" for f in shown]
        if len(self.flights) > len(shown):
            out.append(f"  ... {len(self.flights) - len(shown)} more flight(s), "
                       f"{len(self.stale)} stale in all")
        out.append(f"  verdict: {self.verdict()}")
        return out


@dataclass
class ReplayReport:
    selection: Selection
    items: list[ReplayItem] = field(default_factory=list)
    too_many: bool = False

    @property
    def refused(self) -> list[ReplayItem]:
        return [i for i in self.items if i.refusal]

    @property
    def stale(self) -> list[ReplayItem]:
        return [i for i in self.items if not i.refusal and i.stale]

    def blockers(self, force_stale: str | None) -> list[str]:
        """Why an apply of this selection would be refused as a whole (empty: it may go ahead)."""
        out = []
        if not self.items:
            out.append("no message matches the selection")
        if self.too_many:
            out.append(f"the selection matches more than {MAX_SELECTED} messages: narrow it")
        if self.refused:
            out.append(f"{len(self.refused)} selected message(s) may not be replayed")
        if self.stale and not force_stale:
            out.append(f"{len(self.stale)} message(s) touch flights that later messages have changed since: "
                       "give --force-stale REASON to replay them anyway")
        return out

    def summary(self) -> dict[str, object]:
        return {"selected": len(self.items), "refused": len(self.refused), "stale": len(self.stale),
                "replayable": len(self.items) - len(self.refused), "too_many": self.too_many}

    def lines(self) -> list[str]:
        out: list[str] = []
        for item in self.items:
            out += item.lines()
        s = self.summary()
        out.append(f"{s['selected']} message(s) selected: {s['replayable']} replayable, {s['refused']} refused, "
                   f"{s['stale']} stale" + (f" (only the first {MAX_SELECTED} shown)" if self.too_many else ""))
        return out


@dataclass(frozen=True)
class ReplayResult:
    report: ReplayReport
    requeued: tuple[int, ...]
    refused_because: tuple[str, ...]
    audit_id: int | None

    @property
    def applied(self) -> bool:
        return not self.refused_because


def short(text: str | None, limit: int = DETAIL_CHARS) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return text[:limit] + "..."


class Replayer:
    """Preview and apply replays against one state database and its mailbox."""

    def __init__(self, engine: Engine, mailbox: Mailbox, *, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.engine = engine
        self.mailbox = mailbox
        self.max_body_bytes = max_body_bytes

    def preview(self, sel: Selection) -> ReplayReport:
        """What an apply would do; writes nothing."""
        with self.engine.connect() as conn:
            rows = queue_selection.select_messages(conn, sel, limit=MAX_SELECTED + 1)
            decoded = self._decode([r.msg_id for r in rows])
            marks = self._marks(rows)
            report = self._report(conn, sel, rows, decoded, marks)
            conn.rollback()
        return report

    def apply(self, sel: Selection, *, operator: str, reason: str, now: datetime,
              force_stale: str | None = None) -> ReplayResult:
        """Re-queue the selection if every message may be replayed (and no flight is stale, or
        ``force_stale`` says why that is accepted); audit the request either way."""
        if not operator.strip() or not reason.strip():
            raise ValueError("--apply needs --operator NAME and --reason TEXT")
        with self.engine.connect() as conn:
            first = queue_selection.select_messages(conn, sel, limit=MAX_SELECTED + 1)
            conn.rollback()
        decoded = self._decode([r.msg_id for r in first])      # the mailbox is read before any lock
        marks = self._marks(first)
        with self.engine.connect() as conn, conn.begin():
            locks.lock_writer_row(conn)
            rows = queue_selection.select_messages(conn, sel, limit=MAX_SELECTED + 1, for_update=True)
            late = [r.msg_id for r in rows if r.msg_id not in decoded]
            if late:
                decoded.update(self._decode(late))
            report = self._report(conn, sel, rows, decoded, marks)
            blockers = report.blockers(force_stale)
            audit_id = audit.record(conn, operator, "replay", reason,
                                    {**sel.as_json(), "force_stale": force_stale})
            requeued: list[int] = []
            if not blockers:
                note = f"replayed by {operator.strip()} (audit {audit_id}): {reason.strip()}"
                requeued = queue_selection.requeue(conn, [i.row.msg_id for i in report.items], now=now,
                                                   note=note[:2000])
            audit.record_items(conn, audit_id, [self._audit_item(i, requeued, force_stale) for i in report.items])
            audit.set_outcome(conn, audit_id, {**report.summary(), "requeued": len(requeued),
                                               "refused_because": blockers})
        return ReplayResult(report, tuple(requeued), tuple(blockers), audit_id)

    # --- parts ---------------------------------------------------------------------------------
    @staticmethod
    def _audit_item(item: ReplayItem, requeued: Sequence[int], force_stale: str | None) -> audit.AuditItem:
        before = str(item.row.status)
        if item.row.msg_id in requeued:
            result = f"requeued (stale, forced: {force_stale})" if item.stale else "requeued"
            return audit.AuditItem(item.row.msg_id, before, str(Status.PENDING), result[:500])
        if item.refusal:
            result = item.refusal
        elif item.stale and not force_stale:
            result = f"blocked: stale ({', '.join(f.flid for f in item.stale[:5])})"
        else:
            result = "not replayed: the request was refused"
        return audit.AuditItem(item.row.msg_id, before, before, result[:500])

    def _decode(self, msg_ids: list[int]) -> dict[int, Decoded]:
        """Each message's body, decoded, from the mailbox (small bodies in one query)."""
        bodies = self.mailbox.bodies(msg_ids, max_bytes=256 * 1024)
        out: dict[int, Decoded] = {}
        for msg_id in msg_ids:
            if msg_id not in bodies:
                out[msg_id] = Decoded(problem="the mailbox row is gone")
                continue
            body = bodies[msg_id]
            if body is None:
                body = self.mailbox.body(msg_id) or ""
            try:
                msg = decode(body, max_bytes=self.max_body_bytes)
            except SisRefused as exc:
                out[msg_id] = Decoded(problem=f"not decodable: {exc.reason}")
                continue
            except Exception as exc:  # a decoder defect: the replay may be what fixes it
                out[msg_id] = Decoded(problem=f"decoder error: {type(exc).__name__}")
                continue
            out[msg_id] = Decoded(tuple(dict.fromkeys(touched_flids(msg))), routing.route_for(msg) is not None)
        return out

    def _marks(self, rows: Iterable[QueueRow]) -> dict[int, datetime | None]:
        ids = [r.msg_id for r in rows]
        return self.mailbox.processed_at(ids) if ids else {}

    def _report(self, conn: Connection, sel: Selection, rows: list[QueueRow], decoded: Mapping[int, Decoded],
                marks: Mapping[int, datetime | None]) -> ReplayReport:
        too_many = len(rows) > MAX_SELECTED
        rows = rows[:MAX_SELECTED]
        ids = [r.msg_id for r in rows]
        events = outbox.event_summaries(conn, ids)
        todos = queue_selection.todo_states(conn, ids)
        items = []
        for row in rows:
            d = decoded.get(row.msg_id, Decoded(problem="not read"))
            heads = ledger.read_heads(conn, list(d.flids))
            trails = outbox.flight_trails(conn, row.msg_id, d.flids)
            flights = tuple(FlightImpact(f, heads[f].state_version if f in heads else None,
                                         bool(heads[f].deleted) if f in heads else False,
                                         trails.get(f, FlightTrail())) for f in d.flids)
            items.append(ReplayItem(row, d, events.get(row.msg_id, EventSummary()),
                                    _mark(todos.get(row.msg_id), marks.get(row.msg_id)), flights,
                                    refusal(row, d.routable)))
        return ReplayReport(sel, items, too_many)


def _mark(todo: tuple[str, datetime | None] | None, processed_at: datetime | None) -> str:
    mailbox = f"CMINMSGS_DATE_PROCESSED {processed_at:%Y-%m-%d %H:%M:%S}" if processed_at else "not marked"
    return f"{mailbox}; backfill todo {todo[0] if todo else 'none'}"
