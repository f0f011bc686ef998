"""``msgx recover``: replay mailbox rows that are processed there but unknown to the state database.

After the state database is restored from an older backup, the mailbox holds rows marked
processed that this database never registered (the intake refuses to go on, ``StateBehindMailbox``).
Recovery, audited with an operator and a reason:

1. finds them: every marked row above the high-water mark, and every recorded gap whose row
   turned up marked (``find_lost``, also the preview);
2. registers them PENDING in one transaction under the writer row lock, their gaps arrived, the
   high-water mark raised, with one ``operator_audit`` row (action ``recover``) and an item per
   message, ignoring their processed mark (the mark stays as it is: C-15);
3. replays them: a drain of the pump processes every open message in id order, as always (the
   restored database's own open messages first, then the recovered ones);
4. rebuilds the Redis projection from PostgreSQL. A restore rewinds ``state_version``, so the
   projection's version guard keeps the newer pre-restore documents while the replay runs (it
   refuses older versions, it does not fail); the rebuild replaces both the documents and the
   guard's versions with PostgreSQL's.

The replay re-emits the events of the recovered messages. Consumers already hold what the lost
work published before the restore, with event ids and versions the restored database counts again
from an older point; so before it registers anything, recovery reads what the production topics
show published (``published``: every retained record of ``msg`` and ``schd``,
``delivery/published.py``) and moves this database's versions and event ids above it
(``version_floor.lift``, decision O19, version floor): every replayed change reaches a consumer that follows
docs/delivery.md as a newer one. Topics that cannot be read refuse the recovery (``RecoverRefused``,
nothing registered); an installation without Kafka publishes to no topic and has nothing to stay
above.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Connection, Engine

from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.store import audit, locks, queue_figures, registration, version_floor
from msgx_engine.store.session_lock import SessionLock

log = logging.getLogger(__name__)

PAGE = 5_000


@dataclass(frozen=True)
class LostWork:
    """Processed mailbox rows the state database does not know."""

    high_water: int
    above: tuple[int, ...]          # marked rows above the high-water mark
    gaps: tuple[int, ...]           # recorded gaps whose row turned up marked

    @property
    def ids(self) -> list[int]:
        return sorted(set(self.above) | set(self.gaps))

    def describe(self) -> str:
        if not self.ids:
            return "nothing to recover: every processed mailbox row is known to the state database"
        parts = []
        if self.above:
            parts.append(f"{len(self.above)} marked row(s) above the high-water mark {self.high_water}: "
                         f"{id_ranges(self.above)}")
        if self.gaps:
            parts.append(f"{len(self.gaps)} recorded gap(s) that turned up marked: {id_ranges(self.gaps)}")
        return "; ".join(parts)


@dataclass
class RecoverResult:
    lost: LostWork
    audit_id: int | None = None
    registered: list[int] = field(default_factory=list)
    outcome: dict[str, object] = field(default_factory=dict)
    lifted: version_floor.Lifted | None = None


class RecoverRefused(RuntimeError):
    """Nothing was registered: the message says why, in the operator's words (exit 2)."""


def topics_unreadable(why: str) -> RecoverRefused:
    return RecoverRefused(
        f"{why}. Recovery needs what the production topics hold: the replay would otherwise publish versions and "
        "event ids below those the consumers already have, and they would drop the replayed changes. Bring Kafka "
        "back (check MSGX_KAFKA_BOOTSTRAP), then run `msgx recover --apply` again")


def id_ranges(ids: Sequence[int], limit: int = 12) -> str:
    """``1-4, 7, 9-10`` (at most ``limit`` runs, then an ellipsis)."""
    runs: list[tuple[int, int]] = []
    for i in sorted(ids):
        if runs and i == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    text = ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in runs[:limit])
    return text + (", …" if len(runs) > limit else "")


def find_lost(conn: Connection, mailbox: Mailbox) -> LostWork:
    """Every marked row above the high-water mark (paged by primary key) and every recorded gap
    that turned up marked. Reads the whole tail above the mark: an operator's command, not a pass."""
    pos = registration.intake_position(conn)
    gaps = registration.unarrived_gaps(conn, limit=None)
    conn.commit()
    base = pos.accounted_for
    above: list[int] = []
    after = base
    while page := mailbox.marked_ids_above(after, PAGE):
        above += page
        after = page[-1]
    marked_gaps = []
    for i in range(0, len(gaps), 1000):
        marks = mailbox.processed_at(gaps[i:i + 1000])
        marked_gaps += [g for g, mark in marks.items() if mark is not None]
    return LostWork(base, tuple(above), tuple(sorted(marked_gaps)))


def marked_at(mailbox: Mailbox, ids: Sequence[int], now: datetime) -> dict[int, datetime]:
    """When the lost state finished each row (its mark: this installation's clock, whole seconds,
    no later than now): taken as the row's arrival, so an answer the lost state applied in time is
    not refused as late now (L16, verdicts from the mailbox). Never earlier than the real arrival: an answer it refused
    as late is refused again."""
    found: dict[int, datetime] = {}
    for n in range(0, len(ids), 1000):
        for i, mark in mailbox.processed_at(ids[n:n + 1000]).items():
            if mark is not None:
                found[i] = min(mark.astimezone(), now)       # the inverse of ``clock.local_wall_time``
    return found


class RecoverBusy(RuntimeError):
    """A pump is running: recovery registers nothing while it does."""


def register_lost(engine: Engine, mailbox: Mailbox, *, operator: str, reason: str, now: datetime,
                  published: Callable[[], version_floor.Published] | None = None) -> RecoverResult:
    """Steps 1 and 2 (see the module doc): find the lost rows and register them, audited, while no
    pump runs (the pump's advisory lock is held meanwhile). Audited even when there is nothing.
    ``published`` reads what the topics show published (None: Kafka is not configured); it raises
    ``RecoverRefused`` when they cannot be read, before anything is written."""
    if not operator.strip() or not reason.strip():
        raise ValueError("recover needs --operator NAME and --reason TEXT")
    lock = SessionLock(engine, locks.PUMP, "msgx recover", RecoverBusy, refusal=(
        "a msgx pump is running: stop it (and the Dagster sensor that starts it) before `msgx recover`"))
    with lock.held() as conn:
        lost = find_lost(conn, mailbox)
        result = RecoverResult(lost)
        above = published() if published is not None and lost.ids else None
        with conn.begin():
            locks.lock_writer_row(conn)
            ids = lost.ids
            result.lifted = version_floor.lift(conn, above) if above is not None else None
            result.audit_id = audit.record(conn, operator, "recover", reason, {
                "high_water": lost.high_water, "above_high_water": id_ranges(lost.above, limit=1000),
                "marked_gaps": list(lost.gaps), "count": len(ids)})
            arrived = marked_at(mailbox, ids, now)
            result.registered = registration.register_recovered(conn, ids, now, arrived) if ids else []
            audit.record_items(conn, result.audit_id, [
                audit.AuditItem(i, None, "PENDING" if i in result.registered else None,
                                "registered: processed in the mailbox, unknown here"
                                if i in result.registered else "refused: already registered")
                for i in ids])
            audit.set_outcome(conn, result.audit_id, {"registered": len(result.registered)})
    return result


class AlreadyAdopted(RuntimeError):
    """``msgx adopt`` on a state database that already accounts for the mailbox."""


@dataclass(frozen=True)
class Adoption:
    high_water: int
    audit_id: int


def adopt(engine: Engine, mailbox: Mailbox, *, operator: str, reason: str) -> Adoption:
    """``msgx adopt``: an operator states that this empty state database is a first installation,
    so the mailbox's processed rows are history from before it (L12, lost state refused, US-03 AC8).

    The pump refuses an empty state database on a mailbox processed recently (``StateLost``): from
    inside the database a wiped state and a first install look alike. This sets the high-water mark
    to the newest processed row, audited, while no pump runs; a database that already has a mark
    or registered rows is refused (``AlreadyAdopted``): adopting cannot skip lost work there."""
    if not operator.strip() or not reason.strip():
        raise ValueError("adopt needs --operator NAME and --reason TEXT")
    lock = SessionLock(engine, locks.PUMP, "msgx adopt", RecoverBusy, refusal=(
        "a msgx pump is running: stop it (and the Dagster sensor that starts it) before `msgx adopt`"))
    with lock.held() as conn:
        with conn.begin():
            locks.lock_writer_row(conn)
            pos = registration.intake_position(conn)
            if pos.high_water is not None or pos.max_registered:
                raise AlreadyAdopted(
                    f"this state database already accounts for the mailbox up to id {pos.accounted_for}: nothing to "
                    "adopt (for processed rows it does not know, see `msgx recover`)")
            high = mailbox.last_marked_id() or 0
            audit_id = audit.record(conn, operator, "adopt", reason, {"high_water": high},
                                    {"adopted_up_to": high})
            registration.raise_high_water(conn, high)
    log.warning("adopt (audit %s): mailbox rows up to id %s are taken as processed before this installation",
                audit_id, high)
    return Adoption(high, audit_id)


def recover(engine: Engine, mailbox: Mailbox, *, operator: str, reason: str, now: datetime,
            replay: Callable[[], object], rebuild: Callable[[], int] | None,
            published: Callable[[], version_floor.Published] | None = None) -> RecoverResult:
    """All four steps. ``replay`` drains the pump; ``rebuild`` rebuilds the Redis projection (None:
    not configured); ``published`` as ``register_lost``'s. The audit row's outcome gets the statuses
    the recovered messages ended in and what the versions were lifted by."""
    result = register_lost(engine, mailbox, operator=operator, reason=reason, now=now, published=published)
    if not result.registered:
        return result
    log.warning("recover (audit %s): %s registered again; replaying in id order", result.audit_id,
                len(result.registered))
    replay()
    flights = rebuild() if rebuild is not None else None
    with engine.connect() as conn, conn.begin():
        statuses = queue_figures.status_counts_of(conn, result.registered)
        result.outcome = {"registered": len(result.registered), "statuses": statuses,
                          "projection_rebuilt": flights if flights is not None else "not configured",
                          "versions": result.lifted.outcome() if result.lifted is not None
                          else "not lifted: Kafka is not configured, no topic to stay above"}
        assert result.audit_id is not None
        audit.set_outcome(conn, result.audit_id, result.outcome)
    return result

