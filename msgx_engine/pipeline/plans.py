"""Which store writer writes which plan: the typed registry between the pure handlers and the store.

A handler returns plans (frozen dataclasses, ``handlers.decision.Plan``) that say what transaction
1 writes besides flight states. The protocol hands each plan to the writer registered here for its
type; a writer only writes (it decides nothing) and returns the outbox rows it produced. A plan
with no registered writer is a programming error and fails the message (HANDLER_ERROR).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Connection

from msgx_engine.handlers.adft import DayMembers
from msgx_engine.handlers.answers import RequestCompletion
from msgx_engine.handlers.decision import Plan
from msgx_engine.handlers.eror import RequestFailure
from msgx_engine.handlers.reference import BridgeRefresh, RefPlan
from msgx_engine.handlers.seasons import SeasonPlan
from msgx_engine.handlers.snapshot import SnapshotPlan
from msgx_engine.store.bridges import refresh_bridges
from msgx_engine.store.ledger import rejoin_members, write_snapshot
from msgx_engine.store.outbox import OutboxRow
from msgx_engine.store.reference import write_reference
from msgx_engine.store.requests import complete_request, fail_request
from msgx_engine.store.seasons import write_season

P = TypeVar("P", bound=Plan)
PlanWriter = Callable[[Connection, Any, int, datetime], Sequence[OutboxRow]]


def _entry(kind: type[P], writer: Callable[[Connection, P, int, datetime], Sequence[OutboxRow]]
           ) -> tuple[type[Plan], PlanWriter]:
    """One registry entry; the type checker sees that ``writer`` takes plans of ``kind``."""
    return kind, writer


WRITERS: dict[type[Plan], PlanWriter] = dict([
    _entry(SnapshotPlan, write_snapshot),
    _entry(RefPlan, write_reference),
    _entry(BridgeRefresh, refresh_bridges),
    _entry(SeasonPlan, write_season),
    _entry(RequestCompletion, complete_request),
    _entry(RequestFailure, fail_request),
    _entry(DayMembers, rejoin_members),
])


def write_plans(conn: Connection, plans: Iterable[Plan], msg_id: int, now: datetime) -> Sequence[OutboxRow]:
    """Write every plan in order in the caller's transaction; the outbox rows they produced. One
    plan's rows are returned as its writer gave them: a snapshot's are built as they are written
    (``outbox.StateEvents``), so they are not gathered into a list here."""
    produced: list[Sequence[OutboxRow]] = []
    for plan in plans:
        writer = WRITERS.get(type(plan))
        if writer is None:
            raise TypeError(f"no store writer is registered for {type(plan).__name__}")
        produced.append(writer(conn, plan, msg_id, now))
    if len(produced) == 1:
        return produced[0]
    return [row for rows in produced for row in rows]
