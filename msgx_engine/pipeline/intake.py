"""Intake (DESIGN §2 step 1, US-01): register each new mailbox row once in ``proc_state``.

Registration never parses content. The fast path reads only ids above the largest id this
database accounts for (bounded by primary key, so its cost stays flat as the mailbox grows); a
late scan re-reads a window above the low-water id every few seconds, and a compensating full
scan every few minutes catches rows that committed far below it (US-01 AC3). Holes in the id
sequence are recorded as gaps so the queue head can wait ``gap_grace_s`` for them (US-01 AC5).

The full scan reads the whole mailbox at the pump's first pass; after that it rolls (decision
P37, rolling full scan): every late scan reads one more slice of ids, sized so that the slices cover the mailbox once
every ``full_scan_every_s``, and a sweep that reaches the top starts again from the bottom. It
reads as much as a whole scan every five minutes did, but a few milliseconds at a time: a whole
scan of a mailbox of a million rows held the pump for about two seconds, and every message that
arrived meanwhile waited for it.

Every pass also checks that the mailbox holds no processed work this database does not know: a
marked row above the durable high-water mark, or a recorded gap that turned up already marked,
means the state database was restored from an older backup (or another installation processed
those rows). The pass then raises ``StateBehindMailbox`` and the pump stops: going on would
apply newer messages to rewound flights and lose the rows in between silently. ``msgx recover``
replays them. The check reads only the rows above the high-water mark that the fast path reads
anyway (and, with the full scan, the recorded gaps), so it costs one bounded query per pass.

An empty state database (no high-water mark yet, nothing registered) is taken as a first
installation only when the mailbox was not being processed recently (its newest mark is older than
a week). Otherwise the state was most likely lost or re-created: the pass raises ``StateLost`` (a
``StateBehindMailbox``, so the pump stops the same way) until ``msgx recover`` replays the history
or ``msgx adopt`` (audited) records that it is a first installation after all.

A registered, terminal message whose row reads unmarked again (an operator reset its
``CMINMSGS_DATE_PROCESSED`` to NULL) is marked again: its backfill todo goes back to PENDING and
one WARNING names it; the message stays as it ended.

A shadow instance (D29, shadow mode; its mailbox is read-only) reads by id alone, never by the mark that
production writes beside it: the fast path takes every row above its own high-water mark, a
recorded gap is picked up as soon as its row exists, and the mark-based late and full scans, the
"processed rows we never registered" refusal and the re-marking are off (production's marks are
expected there and are none of the shadow's business). Every hole in the id sequence is recorded
as a gap, so a row that commits late is still found through its gap.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from msgx_engine.clock import Clock, local_wall_time
from msgx_engine.mailbox.adapter import Mailbox, MarkedRows
from msgx_engine.pipeline.grouping.queue_floor import QueueFloor
from msgx_engine.pipeline.request_adoption import adopt_sent
from msgx_engine.redact import first_line
from msgx_engine.store import registration

log = logging.getLogger(__name__)

MAX_GAP_IDS = 10_000


@dataclass
class IntakeStats:
    registered: int = 0
    late_arrivals: int = 0
    gaps_recorded: int = 0
    source_error: str | None = None


class StateBehindMailbox(RuntimeError):
    """The mailbox holds processed rows this state database never registered (see the module doc)."""

    def __init__(self, above: MarkedRows, high_water: int, gaps: list[int]) -> None:
        self.above, self.high_water, self.gaps = above, high_water, gaps
        parts = []
        if above.count:
            parts.append(f"{above.count} row(s) with ids {above.first}..{above.last} above its high-water mark "
                         f"{high_water}")
        if gaps:
            shown = ", ".join(map(str, gaps[:10])) + (" …" if len(gaps) > 10 else "")
            parts.append(f"{len(gaps)} recorded gap(s) that turned up marked ({shown})")
        super().__init__(
            "the mailbox holds processed rows this state database never registered: " + " and ".join(parts)
            + ". The state database was most likely restored from an older backup (or another installation "
            "processed these rows). Refusing to process: applying newer messages now would lose them silently. "
            "Replay them with `msgx recover --apply --operator NAME --reason TEXT` (`msgx recover` previews).")


# A state database with no high-water mark meets a mailbox whose newest processed row was marked
# less than this long ago: the mailbox was being processed until recently, so the state was most
# likely lost (wiped, re-created empty), not installed for the first time (L12, lost state refused, US-03 AC8)
RECENT_PROCESSING = timedelta(days=7)


class StateLost(StateBehindMailbox):
    """An empty state database (no high-water mark, nothing registered) on a mailbox that was being
    processed recently: refused like a restore (exit 4) until an operator says which it is."""

    def __init__(self, last_marked: int, marked_at: datetime) -> None:
        RuntimeError.__init__(
            self,
            f"this state database is empty, but the mailbox holds processed rows up to id {last_marked}, the newest "
            f"marked at {marked_at:%Y-%m-%d %H:%M:%S}: the mailbox was being processed until recently, so the state "
            "database was most likely lost or re-created, not installed for the first time. Refusing to process: "
            "taking that history as done would leave every flight it built missing. Restore the state database "
            "from its backup and run `msgx recover --apply --operator NAME --reason TEXT` (or run that here to "
            "replay the mailbox's history into this empty database; `msgx recover` previews). If this really is a "
            "first installation taking over from another system, say so with "
            "`msgx adopt --operator NAME --reason TEXT`.")
        self.above, self.high_water, self.gaps = MarkedRows(0, None, None), 0, []
        self.last_marked, self.marked_at = last_marked, marked_at


class Intake:
    def __init__(self, mailbox: Mailbox, clock: Clock, *, batch: int = 500, late_window: int = 2_000,
                 late_scan_every_s: float = 2.0, full_scan_every_s: float = 300.0) -> None:
        self.mailbox = mailbox
        self.clock = clock
        self.batch = batch
        self.late_window = late_window
        self.late_scan_every_s = late_scan_every_s
        self.full_scan_every_s = full_scan_every_s
        self._last_late: datetime | None = None
        self._last_full: datetime | None = None
        self._sweep: int | None = None       # the id the rolling full scan reads on from (None: between sweeps)
        self.floor = QueueFloor()            # lowered to each row registered (P40, queue floor)
        self._requests_read: int | None = None   # the largest COUTMSGS id read for requests (L16, verdicts from the
                                                 # mailbox)

    # ---------------------------------------------------------------------------------------
    def scan(self, conn: Connection, *, force_full: bool = False) -> IntakeStats:
        """One intake pass on the writer connection; commits its own transactions (the pump runs
        it inside ``writer_scope``, so none of them can end an open group's).

        A mailbox outage is contained here: nothing is registered this pass, ``source_error`` is
        set, and the pump keeps processing what is already registered (US-01 AC4). Processed rows
        this database does not know raise ``StateBehindMailbox`` (nothing is registered).
        """
        stats = IntakeStats()
        now = self.clock.now()
        full = force_full or self._last_full is None
        late = not full and self._due(self._last_late, self.late_scan_every_s, now)
        sweep_starts = late and self._sweep is None and not self.shadow
        pos = registration.intake_position(conn)
        open_gaps = pos.open_gaps
        gaps_to_check = sorted(set(open_gaps) | set(registration.unarrived_gaps(conn) if full or sweep_starts else ()))
        conn.commit()                    # the position read ends before the mailbox is asked
        try:
            if pos.high_water is None:
                pos = self._adopt(conn, pos)
            base = pos.accounted_for
            fresh = self.mailbox.fresh_ids(base, self.batch)
            candidates = list(fresh)
            if self.shadow:
                # production's marks are not the shadow's: a gap whose row exists is simply due
                gap_marks: dict[int, datetime | None] = dict.fromkeys(self._marks(gaps_to_check))
            else:
                gap_marks = self._marks(gaps_to_check)
                self._refuse_unknown_work(base, fresh, gap_marks)
            candidates += [i for i, mark in gap_marks.items() if mark is None]  # picked up within its grace
            if self.shadow:
                self._last_full = now if full else self._last_full
            elif full:
                candidates += self._full_scan(conn)
                self._last_full = now
                self._last_late = now
                self._sweep = None
            elif late:
                low = max(registration.low_water(conn, pos.max_registered) - self.late_window, 0)
                candidates += self.mailbox.unprocessed_ids(low, self.batch * 4)
                candidates += self._sweep_slice(conn, base, now)
                self._last_late = now
            # the requests any installation sent, before the answers among the rows are processed (L16)
            requests_read = adopt_sent(conn, self.mailbox, now, self._requests_read)
            ids = sorted(set(candidates))
            known = registration.registered_among(conn, ids)
            new_ids = [i for i in ids if i not in known]
            holes = self._holes(new_ids, base)
        except SQLAlchemyError as exc:
            if not isinstance(exc, OperationalError) or _is_pg_error(exc):
                raise
            conn.rollback()              # nothing this pass wrote is kept
            log.warning("intake: mailbox %s unreachable, nothing registered this pass: %s", self.mailbox.where,
                        first_line(exc))
            stats.source_error = f"{type(exc).__name__}: {exc}"[:500]
            return stats
        if new_ids:
            self._register(conn, new_ids, pos, now, stats, holes)
        if not self.shadow:
            self._mark_again(conn, sorted(known), now)
        conn.commit()                    # the registration, before the requests read are taken as done
        self._requests_read = requests_read          # read again next pass unless committed
        return stats

    @property
    def shadow(self) -> bool:
        """A read-only (shadow) mailbox: read by id, ignore production's marks (module doc)."""
        return self.mailbox.read_only

    def _adopt(self, conn: Connection, pos: registration.IntakePosition) -> registration.IntakePosition:
        """The first pass of a database without a high-water mark: a fresh installation takes the
        mailbox's already-marked rows as processed before it; one that registered rows before the
        mark existed accounts for exactly those.

        An empty database whose mailbox was processed recently is refused (``StateLost``): a lost
        state looks exactly like a first install from inside the database, and adopting it would
        make every later message of a known flight create a bare skeleton row. ``msgx adopt`` (an
        audited operator decision) sets the mark instead; a mailbox left idle for longer than
        ``RECENT_PROCESSING`` is adopted as before (L12)."""
        high = pos.max_registered if pos.max_registered else (self.mailbox.last_marked_id() or 0)
        if high and not pos.max_registered and not self.shadow:
            marked_at = self.mailbox.processed_at([high]).get(high)
            now = local_wall_time(self.clock.now())
            if marked_at is not None and now - marked_at < RECENT_PROCESSING:
                exc = StateLost(high, marked_at)
                log.error("ALERT %s", exc)
                raise exc
        registration.raise_high_water(conn, high)
        conn.commit()                    # the adopted mark holds whatever the rest of the pass meets
        if high and not pos.max_registered:
            log.warning("adopting the mailbox: rows up to id %s already marked processed are taken as "
                        "processed before this installation", high)
        return registration.IntakePosition(pos.max_registered, high)

    def _marks(self, ids: list[int]) -> dict[int, datetime | None]:
        """The mark of each id that exists in the mailbox (chunked: the passed gaps can be many)."""
        marks: dict[int, datetime | None] = {}
        for i in range(0, len(ids), 1000):
            marks.update(self.mailbox.processed_at(ids[i:i + 1000]))
        return marks

    def _refuse_unknown_work(self, base: int, fresh: list[int], gap_marks: dict[int, datetime | None]) -> None:
        """Marked rows above the high-water mark (up to the last row the fast path read, when its
        batch was full: the next passes read on from there), or gaps that turned up marked."""
        upto = fresh[-1] if len(fresh) >= self.batch else None
        above = self.mailbox.marked_above(base, upto)
        lost_gaps = sorted(i for i, mark in gap_marks.items() if mark is not None)
        if above.count or lost_gaps:
            exc = StateBehindMailbox(above, base, lost_gaps)
            log.error("ALERT %s", exc)
            raise exc

    def _mark_again(self, conn: Connection, known: list[int], now: datetime) -> None:
        """Registered rows the scans found unmarked: the terminal ones lost their mark (C-15)."""
        again = registration.requeue_reset_marks(conn, known, seen_before=now, now=now)
        if again:
            shown = ", ".join(map(str, again[:20])) + (" …" if len(again) > 20 else "")
            log.warning("the processed mark of %s mailbox row(s) was reset to NULL after processing (%s); "
                        "the messages stay processed and are marked again", len(again), shown)

    def _holes(self, new_ids: list[int], base: int) -> list[int]:
        """Ids missing between the previous top and the new rows that do not exist in the mailbox
        (an already marked row is not a gap): the head waits ``gap_grace_s`` for them."""
        top = base
        known = set(new_ids)
        holes: list[int] = []
        for i in sorted(x for x in new_ids if x > base):
            if top and i > top + 1:
                holes.extend(h for h in range(top + 1, i) if h not in known)
            top = i
        if len(holes) > MAX_GAP_IDS:
            log.warning("id jump of %s ids above %s: recording the first %s as gaps", len(holes),
                        base, MAX_GAP_IDS)
            holes = holes[:MAX_GAP_IDS]
        if holes:
            present = self.mailbox.exists(holes)
            holes = [h for h in holes if h not in present]
        return holes

    @staticmethod
    def _due(last: datetime | None, every_s: float, now: datetime) -> bool:
        return last is None or now - last >= timedelta(seconds=every_s)

    def _sweep_slice(self, conn: Connection, top: int, now: datetime) -> list[int]:
        """The rolling full scan's next slice of ids up to ``top`` (the ids the fast path accounts
        for): a sweep's share of one late-scan interval, at least a batch's worth of ids."""
        start = self._sweep or 0
        slices = max(1, int(self.full_scan_every_s / self.late_scan_every_s))
        upto = start + max(self.batch, -(-top // slices))
        found = self.mailbox.unprocessed_ids_between(start, upto)
        if upto >= top:
            self._sweep = None
            registration.record_full_scan(conn, now)
        else:
            self._sweep = upto
        return found

    def _full_scan(self, conn: Connection) -> list[int]:
        found: list[int] = []
        after = 0
        while True:
            page = self.mailbox.unprocessed_ids(after, 5_000)
            if not page:
                break
            found += page
            after = page[-1]
        registration.record_full_scan(conn, self.clock.now())
        return found

    def _register(self, conn: Connection, new_ids: list[int], pos: registration.IntakePosition, now: datetime,
                  stats: IntakeStats, holes: list[int]) -> None:
        done = registration.register(conn, new_ids, pos.max_registered, now, holes, accounted_for=pos.accounted_for)
        self.floor.lower(min(new_ids))
        stats.registered += done.registered
        stats.late_arrivals += len(done.late)
        stats.gaps_recorded += done.gaps_recorded
        for i in sorted(done.late):
            log.warning("late arrival: mailbox id %s registered after larger ids", i)


def _is_pg_error(exc: SQLAlchemyError) -> bool:
    """OperationalErrors from psycopg are PostgreSQL's (the pump reconnects); PyMySQL's are the mailbox's."""
    return type(getattr(exc, "orig", None)).__module__.startswith("psycopg")
