"""The operator audit trail: who asked for what, why, and what came of it (US-10 AC1/AC5, OPS-2).

Every operator action that changes the queue or the archive (replay, skip, recover, archive)
writes one ``operator_audit`` row and, for the messages it looked at, one ``operator_audit_item``
each. Both are written with the caller's connection inside the caller's transaction, so an audit
row commits with the action it describes and a rolled-back action leaves no audit row claiming
it happened. A refused request is audited too (its items say why), in a transaction of its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, insert, select, update

from msgx_engine.store.tables import operator_audit, operator_audit_item


@dataclass(frozen=True)
class AuditItem:
    """The result of one operator action on one message."""

    msg_id: int
    before_status: str | None
    after_status: str | None
    result: str            # 'requeued' | 'refused: malformed' | 'skipped' | ...


@dataclass(frozen=True)
class AuditEntry:
    audit_id: int
    at: datetime
    operator: str
    action: str
    reason: str
    selection: dict[str, object]
    outcome: dict[str, object] | None


def _dumps(doc: Mapping[str, object]) -> str:
    return json.dumps(doc, ensure_ascii=False, sort_keys=True, default=str)


def record(conn: Connection, operator: str, action: str, reason: str, selection: Mapping[str, object],
           outcome: Mapping[str, object] | None = None) -> int:
    """One audit row in the caller's transaction; returns its ``audit_id``."""
    if not operator.strip() or not reason.strip():
        raise ValueError("an audited action needs an operator and a reason")
    return int(conn.execute(insert(operator_audit).values(
        operator=operator.strip(), action=action, reason=reason.strip(), selection=_dumps(selection),
        outcome=_dumps(outcome) if outcome is not None else None)
        .returning(operator_audit.c.audit_id)).scalar_one())


def set_outcome(conn: Connection, audit_id: int, outcome: Mapping[str, object]) -> None:
    """The summary of a request, once known (in the same transaction as ``record``)."""
    conn.execute(update(operator_audit).where(operator_audit.c.audit_id == audit_id)
                 .values(outcome=_dumps(outcome)))


def record_items(conn: Connection, audit_id: int, items: Sequence[AuditItem]) -> None:
    """The per-message results of request ``audit_id`` (one executemany)."""
    if items:
        conn.execute(insert(operator_audit_item), [
            {"audit_id": audit_id, "msg_id": i.msg_id, "before_status": i.before_status,
             "after_status": i.after_status, "result": i.result} for i in items])


def entries(conn: Connection, *, action: str | None = None, limit: int = 50) -> list[AuditEntry]:
    """The newest audit rows first (optionally of one action)."""
    q = select(operator_audit).order_by(operator_audit.c.audit_id.desc()).limit(limit)
    if action is not None:
        q = q.where(operator_audit.c.action == action)
    return [AuditEntry(r.audit_id, r.at, r.operator, r.action, r.reason, json.loads(r.selection or "{}"),
                       json.loads(r.outcome) if r.outcome else None) for r in conn.execute(q)]


def items_of(conn: Connection, audit_id: int) -> list[AuditItem]:
    c = operator_audit_item.c
    rows = conn.execute(select(c.msg_id, c.before_status, c.after_status, c.result)
                        .where(c.audit_id == audit_id).order_by(c.msg_id))
    return [AuditItem(r.msg_id, r.before_status, r.after_status, r.result) for r in rows]
