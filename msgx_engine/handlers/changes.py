"""From extracted element values to ``FlightChange``s, shared by the FLOP, FDEL and ADFT handlers.

Three rules live here so that every message line applies them the same way:

- values -> commands (FS §5.2, D7, empty elements clear): a present scalar or object is ``Set``, a present collection or
  text group is ``Replace`` (input order kept), a present-but-empty element is ``Clear``;
- value-equal filtering (US-05 AC5): a change that would leave what a reader sees exactly as it is
  (same fields, same day, same deleted flag) neither bumps ``state_version`` nor emits events. A
  soft-deleted flight only comes back through ADFT or a snapshot (INV-29); other messages for it
  have no visible effect. Such changes still reach the pipeline (``effective`` keeps them): they
  record which message last wrote each key (last writer wins by mailbox id, docs/decisions.md F6)
  and a deleted flight's hidden fields, so any arrival order converges to the in-order state;
- change -> next state (``next_state``): the one pure step from a change to the state it leads to,
  used by the pipeline to write it and by the derived-field rules to see what a message does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import cast

from msgx_engine.handlers.codeshare import Children
from msgx_engine.handlers.decision import FlightChange
from msgx_engine.handlers.extract import CLEAR
from msgx_engine.state.model import (
    Applied,
    Clear,
    Command,
    FlightState,
    Replace,
    Set,
    apply_change,
)


@dataclass(frozen=True)
class FlightsContext:
    """What the flight-changing routes (FLOP, FDEL, ADFT) load: the current states of the message's
    flights, read and row-locked under the writer lock in transaction 1; FDEL also loads the live
    code-share children of its targets (``children``, for the cascade of C-25)."""

    flights: Mapping[str, FlightState] = field(default_factory=dict)
    children: Children = field(default_factory=dict)


Transitions = Mapping[str, tuple[FlightState | None, FlightState]]


def commands_from_values(values: Mapping[str, object]) -> list[Command]:
    """``block_values`` output -> commands, in the message's element order."""
    cmds: list[Command] = []
    for key, value in values.items():
        if value is CLEAR:
            cmds.append(Clear(key))
        elif isinstance(value, list):
            cmds.append(Replace(key, tuple(value)))
        else:
            cmds.append(Set(key, cast(str | Mapping[str, str], value)))
    return cmds


def effective(change: FlightChange, before: FlightState | None) -> FlightChange | None:
    """The change unless it cannot apply at all: a missing flight it may neither create nor delete
    (a deletion of an unknown flight leaves a tombstone, F6). Value-equal and deleted-flight
    changes are kept: ``next_state`` and the pipeline decide what a reader sees (see module doc)."""
    if before is None and not (change.create or change.delete):
        return None
    return change


def group_by_flid(pairs: Iterable[tuple[str, list[Command]]]) -> dict[str, list[Command]]:
    """Several blocks for one FLID in one message become one change (commands in input order),
    so a flight is written once per message."""
    grouped: dict[str, list[Command]] = {}
    for flid, cmds in pairs:
        grouped.setdefault(flid, []).extend(cmds)
    return grouped


def next_state(change: FlightChange, before: FlightState | None, message_id: int | None, *,
               override: bool = False) -> Applied | None:
    """The state ``change`` leads to from ``before`` (None: nothing to write), last writer wins by
    ``message_id`` (``state.model.apply_change``; ``override``: an operator's replay lands on top);
    ``Applied.visible`` says whether a reader sees it."""
    return apply_change(before, change.flid, change.commands, message_id=message_id, create=change.create,
                        fday=change.fday, delete=change.delete, undelete=change.undelete, override=override)


def transitions(changes: Sequence[FlightChange], current: Mapping[str, FlightState],
                message_id: int | None = None) -> Transitions:
    """Each flight a decision writes: (its state before the message, its state after all of the
    message's changes to it, in order; with ``message_id``, as last writer wins will write it)."""
    out: dict[str, tuple[FlightState | None, FlightState]] = {}
    for change in changes:
        before = current.get(change.flid)
        now = out[change.flid][1] if change.flid in out else before
        result = next_state(change, now, message_id)
        if result is not None:
            out[change.flid] = (before, result.state)
    return out


def merge_changes(changes: Sequence[FlightChange], extra: Iterable[FlightChange]) -> tuple[FlightChange, ...]:
    """``changes`` with ``extra`` folded in: a further change to a flight already changed joins
    that change (its commands appended), so each flight is still written once per message."""
    merged = {c.flid: c for c in changes}
    order = [c.flid for c in changes]
    for change in extra:
        if change.flid in merged:
            first = merged[change.flid]
            merged[change.flid] = replace(first, commands=first.commands + change.commands)
        else:
            merged[change.flid] = change
            order.append(change.flid)
    return tuple(merged[f] for f in order)
