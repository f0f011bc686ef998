"""What a handler decides: the pure output of (message, current states) -> Decision."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from types import EllipsisType

from msgx_engine.state.model import Command

APPLY = "apply"
SKIP = "skip"
DEAD = "dead"


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
    effects: tuple[object, ...] = field(default=())   # ledger/request/reference effects (later issues)

    @staticmethod
    def dead(reason: str, detail: str) -> Decision:
        return Decision(DEAD, reason=reason, detail=detail)

    @staticmethod
    def skip(reason: str, detail: str | None = None) -> Decision:
        return Decision(SKIP, reason=reason, detail=detail)

    @staticmethod
    def apply(*changes: FlightChange, effects: tuple[object, ...] = ()) -> Decision:
        return Decision(APPLY, changes=tuple(changes), effects=effects)
