"""What a handler decides: the pure output of (message, current states) -> Decision."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime
from types import EllipsisType
from typing import Any, Protocol

from msgx_engine.state.model import Command

APPLY = "apply"
SKIP = "skip"
DEAD = "dead"


class Effect(Protocol):
    """A non-flight write of transaction 1 (ledger, request tracking, reference data).

    The handler builds it purely; the protocol calls ``apply`` inside transaction 1 after the
    flight states are written. It may return extra outbox event rows (dicts for ``msg_event``).
    """

    def apply(self, conn: Any, msg_id: int, now: datetime) -> list[dict] | None: ...


@dataclass(frozen=True)
class FlightChange:
    """Commands for one flight. ``create`` makes a missing flight (fday NULL, FS §5.4)."""

    flid: str
    commands: tuple[Command, ...]
    create: bool = True
    fday: date | None | EllipsisType = ...
    delete: bool = False
    undelete: bool = False


@dataclass(frozen=True)
class Decision:
    outcome: str                                  # apply | skip | dead
    reason: str | None = None                     # recorded in proc_state.reason
    detail: str | None = None
    changes: tuple[FlightChange, ...] = ()
    effects: tuple[Effect, ...] = field(default=())

    @staticmethod
    def dead(reason: str, detail: str) -> Decision:
        return Decision(DEAD, reason=reason, detail=detail)

    @staticmethod
    def skip(reason: str, detail: str | None = None) -> Decision:
        return Decision(SKIP, reason=reason, detail=detail)

    @staticmethod
    def apply(*changes: FlightChange, effects: tuple[Effect, ...] = ()) -> Decision:
        return Decision(APPLY, changes=tuple(changes), effects=effects)
