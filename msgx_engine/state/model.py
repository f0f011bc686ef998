"""The flight-state model and the pure merge engine (FS §5).

A ``FlightState`` is one flight's whole current state: scalar values, collections (lists of
entries), exception objects and text groups, all keyed by their SIS element name, plus the
bookkeeping the store keeps (``fday``, ``state_version``, ``last_message_id``, ``deleted``).
Commands say what a message does to one key; ``apply`` turns (state, commands) into the next
state without touching any I/O, so the same inputs always give the same output.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import date
from types import EllipsisType, MappingProxyType
from typing import cast

from msgx_engine.sis.fields import COLLECTION_BY_KEY, OBJECT_BY_KEY, SCALARS, TEXT_GROUP_BY_KEY

Entry = Mapping[str, str]
Value = str | tuple[Entry, ...] | Entry

SCALAR_KEYS = frozenset(SCALARS)
LIST_KEYS = frozenset(COLLECTION_BY_KEY) | frozenset(TEXT_GROUP_BY_KEY)
OBJECT_KEYS = frozenset(OBJECT_BY_KEY)
ALL_KEYS = SCALAR_KEYS | LIST_KEYS | OBJECT_KEYS


def freeze_entry(entry: Mapping[str, str]) -> Entry:
    """Entries are read-only views with their keys sorted, so equal entries compare and print equal."""
    return MappingProxyType({k: entry[k] for k in sorted(entry)})


def kind_of(key: str) -> str:
    if key in SCALAR_KEYS:
        return "scalar"
    if key in LIST_KEYS:
        return "list"
    if key in OBJECT_KEYS:
        return "object"
    raise KeyError(f"{key} is not a flight field")


# --- commands ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Set:
    """Scalar or object present: overwrite (an object is replaced whole)."""

    key: str
    value: str | Entry


@dataclass(frozen=True)
class Clear:
    """Remove the key: column NULL, detail rows deleted, key absent from the JSON."""

    key: str


@dataclass(frozen=True)
class Replace:
    """Collection present: the whole list becomes these entries, in input order."""

    key: str
    entries: tuple[Entry, ...]


Command = Set | Clear | Replace


@dataclass(frozen=True)
class FlightState:
    flid: str
    fields: Mapping[str, Value] = field(default_factory=lambda: MappingProxyType({}))
    fday: date | None = None
    state_version: int = 0
    last_message_id: int | None = None
    deleted: bool = False
    # Derived, not a message field (``state.bridges``, D27): each stand the flight names -> the
    # sorted codes of the airbridges serving it; None while nothing is derived (no stand, or the
    # ABDG reference data was never loaded). ``apply`` keeps it; the writer re-derives it.
    bridges: Mapping[str, tuple[str, ...]] | None = None

    def get(self, key: str) -> Value | None:
        return self.fields.get(key)

    def entries(self, key: str) -> tuple[Entry, ...]:
        """The entries of a collection or text group (empty when absent)."""
        value = self.fields.get(key)
        return value if isinstance(value, tuple) else ()

    def entry(self, key: str) -> Entry | None:
        """The parts of an exception object (None when absent)."""
        value = self.fields.get(key)
        return value if isinstance(value, Mapping) else None

    @staticmethod
    def new(flid: str) -> FlightState:
        return FlightState(flid=flid)

    def with_fields(self, fields: Mapping[str, Value]) -> FlightState:
        return replace(self, fields=MappingProxyType(dict(sorted(fields.items()))))


@dataclass(frozen=True)
class Applied:
    """The next state and what happened: ``changed`` keys differ from before; ``cleared`` is the
    subset that had a value and has none now. A Clear of an already absent key is in neither, so
    a whole-state rewrite (ADFT, snapshot) reports only what really changed in its ``msg`` event."""

    state: FlightState
    cleared: frozenset[str]
    changed: frozenset[str]


def _validate(cmd: Command) -> None:
    kind = kind_of(cmd.key)
    if isinstance(cmd, Replace) and kind != "list":
        raise ValueError(f"Replace on non-list key {cmd.key}")
    if isinstance(cmd, Set) and kind == "list":
        raise ValueError(f"Set on list key {cmd.key}; use Replace")
    if isinstance(cmd, Set) and kind == "object" and not isinstance(cmd.value, Mapping):
        raise ValueError(f"object {cmd.key} needs a mapping value")
    if isinstance(cmd, Set) and kind == "scalar" and not isinstance(cmd.value, str):
        raise ValueError(f"scalar {cmd.key} needs a string value")


def apply(state: FlightState, commands: Iterable[Command], *, message_id: int | None,
          fday: date | None | EllipsisType = ..., undelete: bool = False) -> Applied:
    """Merge commands into ``state``: absent keys untouched, Set overwrites, Clear removes,
    Replace swaps the whole list. The version always advances by one and the message is recorded.

    ``fday=...`` keeps the current day; a snapshot passes its day explicitly (FS §5.4).
    """
    fields = dict(state.fields)
    touched: set[str] = set()
    for cmd in commands:
        _validate(cmd)
        touched.add(cmd.key)
        if isinstance(cmd, Clear):
            fields.pop(cmd.key, None)
        elif isinstance(cmd, Replace):
            entries = tuple(freeze_entry(e) for e in cmd.entries)
            if entries:
                fields[cmd.key] = entries
            else:
                fields.pop(cmd.key, None)     # an empty list is stored and sent as absent (FS §6.2)
        else:
            fields[cmd.key] = freeze_entry(cmd.value) if isinstance(cmd.value, Mapping) else cmd.value
    changed = {k for k in touched if fields.get(k) != state.fields.get(k)}
    cleared = {k for k in changed if k not in fields}
    next_state = replace(
        state,
        fields=MappingProxyType(dict(sorted(fields.items()))),
        state_version=state.state_version + 1,
        last_message_id=message_id,
        fday=state.fday if fday is ... else fday,
        deleted=False if undelete else state.deleted,
    )
    return Applied(next_state, frozenset(cleared), frozenset(changed))


def full_state_commands(fields: Mapping[str, Value]) -> list[Command]:
    """Commands that make a state hold exactly ``fields``: every other key is cleared (D1)."""
    cmds: list[Command] = []
    for key in sorted(ALL_KEYS):
        value = fields.get(key)
        if value is None:
            cmds.append(Clear(key))
        elif kind_of(key) == "list":
            cmds.append(Replace(key, tuple(cast(Iterable[Entry], value))))
        else:
            cmds.append(Set(key, cast(str | Entry, value)))
    return cmds
