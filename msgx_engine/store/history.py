"""A flight's history without SQL: ``msgx history FLID`` and ``GET /flights/{FLID}/history``.

"Why does this flight show gate B7?" is answered by the outbox: every change msgx applied to a
flight is written there, in the same transaction, as events carrying the flight's new
``state_version`` and the mailbox id of the message that caused it (a ``msg`` change event with
the changed keys, and the ``schd`` whole state or tombstone). This module reads them, archived
ones included, and tells per version: which message (mailbox id, TYPE/STYP, when msgx received
it), which fields it changed, and whether its events reached Kafka and Redis.

The changed fields are the ``msg`` event's ``CHANGES`` keys (what consumers were told). A version
without a change event (a snapshot, a reference-data republish) is compared with the whole state
of the version before it; the first one is "created", a tombstone "deleted".

Reaching Redis: the projection is written between a message's two transactions, before its events
are released (``released_at``); released therefore means written, where Redis is configured.
Reaching Kafka: every event of the version delivered (``sent_at``), or one given up (``dead_at``).

The read is by FLID, which ``msg_event`` has no index for (its archive has one): a sequential scan
of the online outbox, which archiving keeps to a few days; fine for an operator's question, not
for a hot path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, select, union_all

from msgx_engine.store.archive import HOUSEKEEPING_MSG_ID  # events msgx wrote on its own (a retired flight)
from msgx_engine.store.tables import msg_event, msg_event_archive, proc_state, proc_state_archive

IGNORED_KEYS = frozenset({"STATE_VERSION"})


@dataclass(frozen=True)
class Change:
    """One version of a flight: what a message did to it, and how far its events got."""

    version: int
    msg_id: int
    msg_type: str | None
    msg_styp: str | None
    received_at: datetime | None         # when msgx registered the mailbox row (None: housekeeping, purged)
    what: str                            # created, changed, deleted
    fields: tuple[str, ...]
    events: int
    released: bool                       # post-commit step done: the Redis projection written (if configured)
    sent: int                            # events delivered to Kafka
    dead: int                            # events given up after their delivery attempts

    def kafka(self, configured: bool) -> str:
        """delivered, dead (one given up: revive it), waiting (released, not yet delivered),
        not configured, or unreleased (its message has not finished)."""
        if self.dead:
            return "dead"
        if self.sent == self.events:
            return "delivered"
        if not self.released:
            return "unreleased"
        return "waiting" if configured else "not configured"

    def redis(self, configured: bool) -> str:
        """written, not configured, or unreleased (its message has not finished)."""
        if not configured:
            return "not configured"
        return "written" if self.released else "unreleased"

    def as_json(self, *, kafka_configured: bool, redis_configured: bool) -> dict[str, object]:
        return {"state_version": self.version, "msg_id": self.msg_id, "type": self.msg_type, "styp": self.msg_styp,
                "received_at": self.received_at.isoformat() if self.received_at else None, "what": self.what,
                "fields": list(self.fields), "events": self.events, "kafka_sent": self.sent, "kafka_dead": self.dead,
                "kafka": self.kafka(kafka_configured), "redis": self.redis(redis_configured)}


def _events(conn: Connection, flid: str) -> list:
    both = union_all(*[select(t.c.event_id, t.c.msg_id, t.c.topic, t.c.kind, t.c.state_version, t.c.payload,
                              t.c.released_at, t.c.sent_at, t.c.dead_at).where(t.c.flid == flid)
                       for t in (msg_event, msg_event_archive)]).subquery()
    return list(conn.execute(select(both).order_by(both.c.event_id)))


def _messages(conn: Connection, msg_ids: list[int]) -> dict[int, tuple[str | None, str | None, datetime]]:
    if not msg_ids:
        return {}
    both = union_all(*[select(t.c.msg_id, t.c.msg_type, t.c.msg_styp, t.c.created_at).where(t.c.msg_id.in_(msg_ids))
                       for t in (proc_state, proc_state_archive)])
    return {r[0]: (r[1], r[2], r[3]) for r in conn.execute(both)}


def _diff(before: dict | None, after: dict) -> tuple[str, ...]:
    if before is None:
        return ()
    keys = (set(before) | set(after)) - IGNORED_KEYS
    return tuple(sorted(k for k in keys if before.get(k) != after.get(k)))


def flight_history(conn: Connection, flid: str) -> list[Change]:
    """Every version of ``flid`` msgx wrote, oldest first (empty: msgx never wrote this flight)."""
    rows = _events(conn, flid)
    groups: dict[tuple[int, int], list] = {}
    for r in rows:                       # in event order: a purged flight's versions start again at 1
        groups.setdefault((r.msg_id, r.state_version), []).append(r)
    messages = _messages(conn, sorted({m for m, _ in groups}))
    out: list[Change] = []
    state: dict | None = None
    for (msg_id, version), events in groups.items():
        change = next((e for e in events if e.kind == "change"), None)
        whole = next((e for e in events if e.kind in ("state", "tombstone")), None)
        doc = json.loads(change.payload) if change is not None else {}
        new_state = json.loads(whole.payload) if whole is not None and whole.kind == "state" else None
        if whole is not None and whole.kind == "tombstone":
            what, fields = "deleted", tuple(sorted(doc.get("CHANGES", {})))
        elif change is not None:
            what, fields = ("created" if state is None else "changed"), tuple(sorted(doc.get("CHANGES", {})))
        elif new_state is not None:
            what, fields = ("created" if state is None else "changed"), _diff(state, new_state)
        else:
            what, fields = "changed", ()
        if new_state is not None:
            state = new_state
        elif whole is not None and whole.kind == "tombstone":
            state = None
        msg_type, msg_styp, received = messages.get(msg_id, (doc.get("TYPE"), doc.get("STYP"), None))
        out.append(Change(version, msg_id, msg_type or doc.get("TYPE"), msg_styp or doc.get("STYP"), received,
                          what, fields, len(events), all(e.released_at is not None for e in events),
                          sum(1 for e in events if e.sent_at is not None),
                          sum(1 for e in events if e.dead_at is not None)))
    return out


def history_lines(flid: str, changes: list[Change], *, kafka_configured: bool, redis_configured: bool) -> list[str]:
    """The history as an operator reads it: one line per version, oldest first."""
    head = [f"flight {flid}: {len(changes)} version(s), oldest first"]
    rows = [[str(c.version), str(c.msg_id),
             f"{c.msg_type or '?'}/{c.msg_styp or '?'}" if c.msg_id != HOUSEKEEPING_MSG_ID else "msgx itself",
             c.received_at.strftime("%Y-%m-%d %H:%M:%S %Z").strip() if c.received_at else "-",
             c.kafka(kafka_configured), c.redis(redis_configured), c.what,
             ", ".join(c.fields) or "-"] for c in changes]
    header = ["VERSION", "MAILBOX ID", "TYPE/STYP", "RECEIVED", "KAFKA", "REDIS", "WHAT", "FIELDS"]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    def line(values: list[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()
    return head + [line(header)] + [line(r) for r in rows]
