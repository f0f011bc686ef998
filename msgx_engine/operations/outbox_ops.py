"""The outbox as an operator sees and repairs it: ``msgx outbox`` (preview) and ``--apply`` (revive).

An event whose record the broker refused after its attempts (too large, not authorized, a topic
that cannot exist; a broker that cannot be reached never kills an event, decision F16, refusals make events DEAD) is
dead: it stays in ``msg_event`` with its last error, the delivery-backlog check fails, and the later events
of its flight and topic wait behind it (the dispatcher never lets them overtake it). Until now
nothing but SQL could send it again.

The preview lists, per logical topic, the undelivered events and the oldest one's age, the
dispatcher's last send error with the broker it tried (``store.kafka_status``: Kafka's own words,
which were only in the dispatching process's stderr), and every dead event (event id, topic, FLID,
mailbox id, attempts, an excerpt of the last error, how many later events wait behind it).
Nothing is written.

Reviving (``--apply --operator NAME --reason TEXT`` with ``--ids`` or ``--all-dead``) gives the
chosen dead events a fresh set of attempts, due at once, in one transaction with one audit row
(action ``outbox_revive``) and one item per message whose events were revived. The dispatcher
then sends each one before the later events of its flight (it is the oldest unsent one there).
All or nothing: an id that is not a dead event refuses the request (exit 2, nothing revived); so
does a request that matches nothing. After the commit running dispatchers are woken, as the pump
wakes them after a release.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine

from msgx_engine.store import audit, kafka_status, outbox
from msgx_engine.store.kafka_status import KafkaStatus
from msgx_engine.store.outbox import DeadEvent
from msgx_engine.store.release_signal import ReleaseNotifier

ERROR_CHARS = 160        # the excerpt of an event's last error shown per line
SEND_ERROR_CHARS = 400   # the dispatcher's last send error, with the broker's own words
MAX_SHOWN = 1000         # dead events listed (and revived by --all-dead) per request


def excerpt(text: str | None, limit: int = ERROR_CHARS) -> str:
    if not text:
        return "-"
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= limit else one_line[:limit] + "..."


def _age(now: datetime, then: datetime | None) -> str:
    if then is None:
        return "-"
    seconds = max(0, int((now - then).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"


def dead_line(ev: DeadEvent) -> str:
    behind = f", {ev.held_behind} later event(s) of this flight wait behind it" if ev.held_behind else ""
    return (f"event {ev.event_id}: topic {ev.topic}, flight {ev.flid}, mailbox id {ev.msg_id}, "
            f"{ev.attempts} attempt(s), dead since {ev.dead_at:%Y-%m-%d %H:%M:%S%z}{behind}\n"
            f"  last error: {excerpt(ev.error)}")


def dead_json(ev: DeadEvent) -> dict[str, object]:
    return {"event_id": ev.event_id, "topic": ev.topic, "flid": ev.flid, "msg_id": ev.msg_id, "kind": ev.kind,
            "attempts": ev.attempts, "error": excerpt(ev.error), "dead_at": ev.dead_at.isoformat(),
            "held_behind": ev.held_behind}


@dataclass(frozen=True)
class OutboxPreview:
    now: datetime
    undelivered: dict[str, int]          # per logical topic: released, not delivered, not dead
    oldest_released_at: datetime | None
    dead: tuple[DeadEvent, ...]
    dead_total: int
    kafka: KafkaStatus | None = None

    def lines(self) -> list[str]:
        out = [f"{'topic':<8}{'undelivered':>12}"]
        for topic in sorted(set(self.undelivered) | {outbox.TOPIC_MSG, outbox.TOPIC_SCHD}):
            out.append(f"{topic:<8}{self.undelivered.get(topic, 0):>12}")
        out.append(f"oldest undelivered event released {_age(self.now, self.oldest_released_at)} ago"
                   if self.oldest_released_at else "no event waits for delivery")
        out += self._send_error_lines()
        if not self.dead_total:
            out.append("no dead events")
            return out
        out.append(f"{self.dead_total} dead event(s) (given up after their delivery attempts):")
        out += [dead_line(ev) for ev in self.dead]
        if self.dead_total > len(self.dead):
            out.append(f"... {self.dead_total - len(self.dead)} more")
        ids = ",".join(str(ev.event_id) for ev in self.dead[:50]) + (",..." if len(self.dead) > 50 else "")
        out.append(f"to send them again: msgx outbox --apply --ids {ids} --operator NAME --reason TEXT "
                   "(or --all-dead)")
        return out

    def _send_error_lines(self) -> list[str]:
        k = self.kafka
        if k is None or k.error_at is None:
            return []
        since = (f"; delivered again {_age(self.now, k.delivered_at)} ago" if not k.failing and k.delivered_at
                 else "; nothing delivered since")
        return [f"last send error {_age(self.now, k.error_at)} ago, broker {k.broker}{since}:",
                f"  {excerpt(k.last_error, SEND_ERROR_CHARS)}"]

    def as_json(self) -> dict[str, object]:
        k = self.kafka
        last = None if k is None or k.error_at is None else {
            "broker": k.broker, "error": k.last_error, "age_s": (self.now - k.error_at).total_seconds(),
            "failing": k.failing}
        return {"undelivered": self.undelivered,
                "oldest_undelivered_age_s": (self.now - self.oldest_released_at).total_seconds()
                if self.oldest_released_at else None,
                "last_send_error": last,
                "dead_total": self.dead_total, "dead": [dead_json(ev) for ev in self.dead]}


@dataclass(frozen=True)
class ReviveResult:
    selected: tuple[DeadEvent, ...]
    revived: tuple[int, ...]
    refused_because: tuple[str, ...]
    audit_id: int | None

    @property
    def applied(self) -> bool:
        return not self.refused_because

    def lines(self) -> list[str]:
        if not self.applied:
            return [f"refused, nothing revived: {why}" for why in self.refused_because]
        out = [f"revived event {ev.event_id}: topic {ev.topic}, flight {ev.flid}, mailbox id {ev.msg_id}"
               for ev in self.selected]
        out.append(f"revived {len(self.revived)} dead event(s); the dispatcher sends each before the later "
                   "events of its flight")
        return out


def preview(engine: Engine, now: datetime) -> OutboxPreview:
    """The outbox as it stands; writes nothing."""
    with engine.connect() as conn:
        undelivered = outbox.unsent_by_topic(conn)
        oldest = outbox.oldest_unsent_released_at(conn)
        dead = outbox.dead_events(conn, limit=MAX_SHOWN)
        total = outbox.dead_count(conn) if len(dead) >= MAX_SHOWN else len(dead)
        kafka = kafka_status.read(conn)
        conn.rollback()
    return OutboxPreview(now, undelivered, oldest, tuple(dead), total, kafka)


def revive(engine: Engine, *, event_ids: Sequence[int] = (), all_dead: bool = False, operator: str,
           reason: str) -> ReviveResult:
    """Revive the given dead events (or every one, up to ``MAX_SHOWN``), audited; all or nothing."""
    if not operator.strip() or not reason.strip():
        raise ValueError("--apply needs --operator NAME and --reason TEXT")
    if bool(event_ids) == all_dead:
        raise ValueError("choose the events: --ids EVENT_ID... or --all-dead (not both)")
    ids = list(dict.fromkeys(event_ids))
    with engine.connect() as conn, conn.begin():
        found = outbox.dead_events(conn, None if all_dead else ids, limit=MAX_SHOWN, for_update=True)
        blockers: list[str] = []
        if not found:
            blockers.append("no dead event matches" if all_dead else "none of the given events is dead")
        missing = [] if all_dead else sorted(set(ids) - {ev.event_id for ev in found})
        if found and missing:
            blockers.append("not dead events (delivered, still being tried, or unknown): "
                            + ", ".join(map(str, missing[:50])) + (" ..." if len(missing) > 50 else ""))
        audit_id = audit.record(conn, operator, "outbox_revive", reason,
                                {"event_ids": ids, "all_dead": all_dead})
        revived: list[int] = []
        if not blockers:
            revived = outbox.revive_dead(conn, [ev.event_id for ev in found])
        audit.record_items(conn, audit_id, _audit_items(found, revived))
        audit.set_outcome(conn, audit_id, {"selected": len(found), "revived": len(revived),
                                           "refused_because": blockers})
    if revived:
        notify = ReleaseNotifier(engine)     # a waiting dispatcher looks at once (best effort)
        notify()
        notify.close()
    return ReviveResult(tuple(found), tuple(revived), tuple(blockers), audit_id)


def _audit_items(found: Sequence[DeadEvent], revived: Sequence[int]) -> list[audit.AuditItem]:
    """One item per message (the audit item's key), naming its events and what became of them."""
    by_msg: dict[int, list[DeadEvent]] = {}
    for ev in found:
        by_msg.setdefault(ev.msg_id, []).append(ev)
    done = set(revived)
    items = []
    for msg_id, events in sorted(by_msg.items()):
        names = ", ".join(f"{ev.event_id} ({ev.topic}, {ev.flid})" for ev in events)
        if all(ev.event_id in done for ev in events):
            items.append(audit.AuditItem(msg_id, "event DEAD", "event PENDING", f"revived event(s) {names}"[:500]))
        else:
            items.append(audit.AuditItem(msg_id, "event DEAD", "event DEAD",
                                         f"not revived: the request was refused ({names})"[:500]))
    return items
