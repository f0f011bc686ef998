"""An operator closes dead letters that cannot or need not be replayed: ``msgx acknowledge``.

A DEAD message (``malformed``, ``oversize``, a dead one whose business effect came another way)
or a SKIPPED(unsupported) one waits for an operator: it is in the dead-letter count, and archiving
keeps it. Some of them can never be replayed, so without this they would keep the dead-letter
check failing until someone deleted rows by hand. Acknowledging records who closed it and when
(``proc_state.acknowledged_at`` / ``acknowledged_by``) and changes nothing else: the status,
reason, error and history stay, so the message stays queryable and is archived normally later.

A dead letter a replay would fix once its cause is gone (DEAD(exhausted), DEAD(missing)) is refused
unless the operator says ``even_if_replayable`` (``--even-if-replayable``): pasting an
acknowledgement must not silently close, say, a flight's cancellation that never reached anyone.

All or nothing, like a replay: when any given id is unknown, not DEAD or SKIPPED(unsupported),
replayable (without ``even_if_replayable``) or already acknowledged, nothing is acknowledged and
the command exits 2 naming each refused id and why. Every request, refused or not, is one audit
row (action ``acknowledge``) with one item per id, in the same transaction as its effect, under the
writer row lock (a replay or skip of the same row cannot interleave). A later replay of an
acknowledged message clears the acknowledgement (``store.queue_selection.requeue``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine

from msgx_engine.store import audit, locks, queue, queue_selection
from msgx_engine.store.queue_selection import QueueRow, Selection

MAX_IDS = 1000      # one request; a larger one is refused (acknowledge in parts)


def refusal(row: QueueRow | None, *, even_if_replayable: bool = False) -> str | None:
    """Why a message may not be acknowledged, in the operator's words (None: it may)."""
    if row is None:
        return "refused: no such message (not registered, or already archived)"
    if row.acknowledged_at is not None:
        return (f"refused: already acknowledged by {row.acknowledged_by or 'someone'} "
                f"at {row.acknowledged_at:%Y-%m-%d %H:%M:%S%z}")
    if row.waits_for_operator and row.replayable_dead and not even_if_replayable:
        return (f"refused: DEAD({row.reason}) is replayable once its cause is fixed, and acknowledging it would "
                f"drop its effect for good; preview with `msgx replay --ids {row.msg_id}`, or give "
                "--even-if-replayable to close it without a replay")
    if row.waits_for_operator:
        return None
    what = f"{row.status}({row.reason})" if row.reason else str(row.status)
    if row.status in queue.OPEN:
        return f"refused: {what} is still being processed (skip it if it cannot proceed)"
    return f"refused: {what} does not wait for an operator (only dead and unsupported messages do)"


@dataclass(frozen=True)
class AcknowledgeItem:
    msg_id: int
    row: QueueRow | None
    refusal: str | None

    def describe(self) -> str:
        r = self.row
        if r is None:
            return f"mailbox id {self.msg_id}: {self.refusal}"
        head = f"{r.status}({r.reason})" if r.reason else str(r.status)
        kind = f"{r.msg_type}/{r.msg_styp}" if r.msg_type else "type unknown"
        return f"mailbox id {self.msg_id}: {head} {kind}" + (f": {self.refusal}" if self.refusal else "")


@dataclass(frozen=True)
class AcknowledgeResult:
    items: tuple[AcknowledgeItem, ...]
    acknowledged: tuple[int, ...]
    refused_because: tuple[str, ...]
    audit_id: int

    @property
    def applied(self) -> bool:
        return not self.refused_because

    @property
    def refused(self) -> tuple[AcknowledgeItem, ...]:
        return tuple(i for i in self.items if i.refusal)

    def lines(self) -> list[str]:
        if not self.applied:
            return [i.describe() for i in self.refused]
        return [f"{i.describe()}: acknowledged" for i in self.items]


def acknowledge(engine: Engine, msg_ids: Sequence[int], *, operator: str, reason: str,
                now: datetime, even_if_replayable: bool = False) -> AcknowledgeResult:
    """Acknowledge every id, or none when one is refused; audit the request either way.
    ``even_if_replayable``: the operator closes replayable dead letters too, knowingly."""
    if not operator.strip() or not reason.strip():
        raise ValueError("acknowledging needs --operator NAME and --reason TEXT")
    ids = list(dict.fromkeys(msg_ids))
    if not ids:
        raise ValueError("give at least one mailbox id")
    with engine.connect() as conn, conn.begin():
        locks.lock_writer_row(conn)
        rows = {r.msg_id: r for r in queue_selection.select_messages(conn, Selection(ids=tuple(ids)), limit=len(ids),
                                                                     for_update=True)}
        items = tuple(AcknowledgeItem(i, rows.get(i), refusal(rows.get(i), even_if_replayable=even_if_replayable))
                      for i in ids)
        blockers = []
        if len(ids) > MAX_IDS:
            blockers.append(f"more than {MAX_IDS} ids in one request: acknowledge them in parts")
        refused = [i for i in items if i.refusal]
        if refused:
            blockers.append(f"{len(refused)} of {len(ids)} message(s) may not be acknowledged")
        audit_id = audit.record(conn, operator, "acknowledge", reason,
                                {"ids": ids, **({"even_if_replayable": True} if even_if_replayable else {})})
        done: list[int] = []
        if not blockers:
            done = queue_selection.acknowledge(conn, ids, now=now, operator=operator.strip())
            if len(done) != len(ids):      # cannot happen under the row locks; never half an acknowledgement
                raise RuntimeError(f"acknowledged {len(done)} of {len(ids)} locked messages")
        audit.record_items(conn, audit_id, [_audit_item(i, bool(done)) for i in items])
        audit.set_outcome(conn, audit_id, {"selected": len(ids), "acknowledged": len(done),
                                           "refused": len(refused), "refused_because": blockers})
    return AcknowledgeResult(items, tuple(done), tuple(blockers), audit_id)


def _audit_item(item: AcknowledgeItem, applied: bool) -> audit.AuditItem:
    before = str(item.row.status) if item.row else None
    if applied:
        return audit.AuditItem(item.msg_id, before, before, "acknowledged")
    return audit.AuditItem(item.msg_id, before, before,
                           (item.refusal or "not acknowledged: the request was refused")[:500])

