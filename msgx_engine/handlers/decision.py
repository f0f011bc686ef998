"""What a handler decides: the pure output of (message, loaded context) -> Decision.

A Decision carries flight changes (commands per flight, applied by the pipeline to the states
the route loaded) and plans: frozen dataclasses that say what else transaction 1 writes (a
snapshot, a reference category, a season, a request completion). The handler computes a plan
whole; the pipeline hands each plan to the store writer registered for its type
(``pipeline.plans``), which only writes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from types import EllipsisType

from msgx_engine.state.model import Command

APPLY = "apply"
SKIP = "skip"
DEAD = "dead"


class Plan:
    """Base of every non-flight write plan (a frozen dataclass per kind)."""

    __slots__ = ()


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
    plans: tuple[Plan, ...] = field(default=())
    alert: str | None = None                      # an operator must hear of it (logged as ALERT)

    @staticmethod
    def dead(reason: str, detail: str) -> Decision:
        return Decision(DEAD, reason=reason, detail=detail)

    @staticmethod
    def skip(reason: str, detail: str | None = None, *, alert: str | None = None) -> Decision:
        return Decision(SKIP, reason=reason, detail=detail, alert=alert)

    @staticmethod
    def apply(*changes: FlightChange, plans: tuple[Plan, ...] = (), alert: str | None = None) -> Decision:
        return Decision(APPLY, changes=tuple(changes), plans=plans, alert=alert)
