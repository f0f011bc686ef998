"""The archiving run (US-11, INV-25, FS §3.6/§7, D2, soft delete; D26, identity window; D31, FLOP for an unknown
FLID): ``msgx archive`` and ``archive_job``.

Steps, each in batches of one transaction (a crash loses at most the batch in flight, and a rerun
picks up where the last committed batch ended: every step selects what is still to do):

1. **messages**: terminal messages registered before the cutoff, with nothing still owed (no
   pending mark, no undelivered event), move with their history and events into the archive
   tables (``store.archive``). A message that waits for an operator (an unacknowledged DEAD or
   SKIPPED(unsupported) one) is kept whatever its age, and the report says how many and why.
   The cutoff is ``now - max(retention, identity window)``: an identity binding lives on its
   message's row, so a message is never archived while its binding may still dedupe a later
   arrival (D26, identity window), and a mailbox id once registered is never registered again (intake looks
   archived ids up).
2. **unowned flights** (FDAY NULL, D31, FLOP for an unknown FLID) idle for ``purge_after`` are retired: soft-deleted
   with a tombstone, so Kafka consumers, the projection and ``GET /all/flights`` learn it.
3. **soft-deleted flights** older than ``purge_after`` whose tombstones were delivered are
   removed, row and details (D2's "physical removal only by archiving").
4. **ledgers** of days older than ``ledger_retention`` (FS §3.6's open item): ``schd_gen``,
   ``schd_gen_flid``, ``schd_gen_run``, one day per transaction.

The mailbox is never touched. Flights retired or purged are also removed from the Redis
projection when it is configured (after the batch commits, as the pump's post-commit step does; a
Redis error is logged as an ALERT and left to the drift check and the rebuild job). A run that
changed something writes one ``archive`` row in the operator audit trail with the counts.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo

from sqlalchemy import Connection, Engine

from msgx_engine import faults
from msgx_engine.clock import Clock
from msgx_engine.config import spoken
from msgx_engine.store import archive, audit, identity, locks, queue_figures

log = logging.getLogger(__name__)

AIRPORT_TZ = ZoneInfo("Asia/Shanghai")


class ProjectionSync(Protocol):
    """What archiving needs from the Redis projection (``delivery.projection.Projection``)."""

    def remove(self, versions: Sequence[tuple[str, int]]) -> int: ...

    def forget(self, flids: Sequence[str]) -> int: ...


@dataclass(frozen=True)
class ArchivePolicy:
    older_than: timedelta                         # terminal messages registered longer ago (1d-7d)
    identity_window: timedelta = timedelta(hours=24)
    purge_after: timedelta = timedelta(days=7)    # unowned and soft-deleted flights (FS §7)
    ledger_retention: timedelta = timedelta(days=30)
    batch: int = 1000

    def message_cutoff(self, now: datetime) -> datetime:
        return now - max(self.older_than, self.identity_window)

    def cutoff_words(self, now: datetime) -> str:
        """The cutoff as the operator reads it: when, and which of the two limits set it."""
        why = (f"the identity window {spoken(self.identity_window.total_seconds())}, longer than the retention "
               f"{spoken(self.older_than.total_seconds())}" if self.identity_window > self.older_than
               else f"the retention {spoken(self.older_than.total_seconds())}")
        return (f"cutoff: finished messages registered before {self.message_cutoff(now):%Y-%m-%d %H:%M:%S %Z} "
                f"({why})").replace(" )", ")")

    def as_json(self) -> dict[str, object]:
        return {"older_than_s": self.older_than.total_seconds(),
                "identity_window_s": self.identity_window.total_seconds(),
                "purge_after_s": self.purge_after.total_seconds(),
                "ledger_retention_days": self.ledger_retention.days, "batch": self.batch}


@dataclass
class ArchiveReport:
    dry_run: bool
    counts: dict[str, int] = field(default_factory=dict)
    batches: int = 0
    projection_errors: int = 0
    audit_id: int | None = None
    kept: dict[str, int] = field(default_factory=dict)    # old enough, kept: they wait for an operator
    cutoff: str = ""                                      # ArchivePolicy.cutoff_words
    held: dict[str, int] = field(default_factory=dict)    # past the retention, held back (store.archive.count_held)

    def add(self, counts: dict[str, int]) -> None:
        for k, v in counts.items():
            self.counts[k] = self.counts.get(k, 0) + int(v)

    @property
    def changed(self) -> int:
        return sum(self.counts.values())

    def lines(self) -> list[str]:
        verb = "would archive or remove" if self.dry_run else "archived or removed"
        out = [self.cutoff] if self.cutoff else []
        out += [f"{'table':<28}{'rows':>10}"]
        out += [f"{name:<28}{n:>10}" for name, n in sorted(self.counts.items())]
        out.append(f"{verb} {self.changed} row(s) in {self.batches} batch(es)"
                   + (f"; {self.projection_errors} projection error(s)" if self.projection_errors else ""))
        out += self.kept_lines()
        return out

    def kept_lines(self) -> list[str]:
        """Why messages old enough to archive stayed, in the operator's words."""
        dead, unsupported = self.kept.get("dead", 0), self.kept.get("unsupported", 0)
        held = self.held
        out = []
        if held.get("identity_window"):
            out.append(f"held {held['identity_window']} finished message(s) past the retention but inside the "
                       "identity window: their binding may still catch a repeat (MSGX_IDENTITY_WINDOW)")
        if held.get("undelivered"):
            out.append(f"held {held['undelivered']} message(s) whose events are not delivered to Kafka yet "
                       "(msgx outbox shows them)")
        if held.get("mark_owed"):
            out.append(f"held {held['mark_owed']} message(s) whose mailbox mark is not written yet "
                       "(msgx status: mailbox marks to write)")
        if dead:
            out.append(f"kept {dead} dead message(s) that wait for an operator: replay, skip or acknowledge "
                       "them first (msgx replay --status DEAD shows them)")
        if unsupported:
            out.append(f"kept {unsupported} message(s) of a type this version does not handle (skipped as "
                       "unsupported) that wait for an operator: replay or acknowledge them first "
                       "(msgx replay --status SKIPPED --select-reason unsupported shows them)")
        return out


class Archiver:
    def __init__(self, engine: Engine, clock: Clock, *, projection: ProjectionSync | None = None) -> None:
        self.engine = engine
        self.clock = clock
        self.projection = projection

    def run(self, policy: ArchivePolicy, *, dry_run: bool = False, operator: str = "archive",
            reason: str = "retention") -> ArchiveReport:
        now = self.clock.now()
        report = ArchiveReport(dry_run)
        ledger_day = now.astimezone(AIRPORT_TZ).date() - timedelta(days=policy.ledger_retention.days)
        report.cutoff = policy.cutoff_words(now)
        with self.engine.connect() as conn:
            report.kept = archive.count_kept(conn, policy.message_cutoff(now))
            report.held = archive.count_held(conn, policy.message_cutoff(now), now - policy.older_than)
            conn.rollback()
        if dry_run:
            with self.engine.connect() as conn:
                report.add(archive.count_archivable(conn, policy.message_cutoff(now)))
                report.add(archive.count_flights(conn, now - policy.purge_after))
                report.add(archive.count_ledgers(conn, ledger_day))
                report.add({"msg_identity": identity.count_expired(conn, self._identity_cutoff(conn, policy, now))})
                conn.rollback()
            return report
        self._messages(policy, now, report)
        self._identities(policy, now, report)
        self._retire(policy, now, report)
        self._purge(policy, now, report)
        self._ledgers(ledger_day, report)
        if report.changed:
            with self.engine.begin() as conn:
                report.audit_id = audit.record(conn, operator, "archive", reason, policy.as_json(),
                                               {**report.counts, "batches": report.batches,
                                                "projection_errors": report.projection_errors,
                                                "kept_waiting": report.kept})
        log.info("archive: %s", ", ".join(f"{k}={v}" for k, v in sorted(report.counts.items())) or "nothing to do")
        return report

    # --- steps -------------------------------------------------------------------------------------
    def _batch_done(self, report: ArchiveReport, counts: dict[str, int]) -> None:
        report.add(counts)
        report.batches += 1
        faults.reach("archive_between_batches")

    def _messages(self, policy: ArchivePolicy, now: datetime, report: ArchiveReport) -> None:
        cutoff, after = policy.message_cutoff(now), 0
        while True:
            with self.engine.begin() as conn:
                ids = archive.archivable_ids(conn, cutoff, after, policy.batch)
                if not ids:
                    report.add({"msg_event": archive.move_housekeeping_events(conn, cutoff)})
                    return
                counts = archive.move_messages(conn, ids, now)
                faults.reach("archive_inside_batch")
            after = ids[-1]
            self._batch_done(report, counts)

    @staticmethod
    def _identity_cutoff(conn: Connection, policy: ArchivePolicy, now: datetime) -> datetime:
        """Bindings registered a window before both now and the oldest message still to be processed
        can bind nothing any more: a backlog older than the window (a long outage) keeps the bindings
        its own duplicates must still meet."""
        _, oldest_open = queue_figures.open_summary(conn)
        return min(now, oldest_open or now) - policy.identity_window

    def _identities(self, policy: ArchivePolicy, now: datetime, report: ArchiveReport) -> None:
        """Identity bindings past their window (D26): without this ``msg_identity`` keeps a row per
        message ever processed."""
        with self.engine.connect() as conn:
            before = self._identity_cutoff(conn, policy, now)
            conn.rollback()
        while True:
            with self.engine.begin() as conn:
                purged = identity.purge_expired(conn, before, policy.batch)
            if not purged:
                return
            self._batch_done(report, {"msg_identity": purged})

    def _retire(self, policy: ArchivePolicy, now: datetime, report: ArchiveReport) -> None:
        while True:
            with self.engine.begin() as conn:
                locks.lock_writer_row(conn)      # a state change: no transaction 1 interleaves
                retired = archive.retire_unowned(conn, now - policy.purge_after, now, policy.batch)
            if not retired:
                return
            self._sync("remove", retired, report)
            self._batch_done(report, {"flight_schd retired": len(retired)})

    def _purge(self, policy: ArchivePolicy, now: datetime, report: ArchiveReport) -> None:
        while True:
            with self.engine.begin() as conn:
                locks.lock_writer_row(conn)
                flids, counts = archive.purge_deleted(conn, now - policy.purge_after, policy.batch)
            if not flids:
                return
            self._sync("forget", flids, report)
            self._batch_done(report, counts)

    def _ledgers(self, before: date, report: ArchiveReport) -> None:
        with self.engine.connect() as conn:
            days = archive.ledger_days_before(conn, before)
            conn.rollback()
        for day in days:
            with self.engine.begin() as conn:
                locks.lock_writer_row(conn)       # a snapshot of that day must not run meanwhile
                counts = archive.purge_ledger_day(conn, day)
            self._batch_done(report, counts)

    def _sync(self, what: str, items: Sequence, report: ArchiveReport) -> None:
        """Tell the projection (after the commit, like the pump's post-commit step)."""
        if self.projection is None:
            return
        try:
            getattr(self.projection, what)(items)
        except Exception as exc:  # Redis down: the drift check reports it, the rebuild job repairs it
            report.projection_errors += 1
            log.error("ALERT archive could not update the Redis projection (%s of %s flight(s)): %s: %s",
                      what, len(items), type(exc).__name__, str(exc)[:200])
