"""The flight-state model and the pure merge engine (FS §5).

A ``FlightState`` is one flight's whole current state: scalar values, collections (lists of
entries), exception objects and text groups, all keyed by their SIS element name, plus the
bookkeeping the store keeps (``fday``, ``state_version``, ``last_message_id``, ``deleted``,
``stamps``). Commands say what a message does to one key; ``apply`` turns (state, commands) into
the next state without touching any I/O, so the same inputs always give the same output.

Last writer wins by mailbox id (docs/decisions.md F6): ``stamps`` remembers, per key, the mailbox
id of the message that last set or cleared it, and under ``DELETED`` the one that last deleted or
restored the flight. A command on a key that a message with a larger id already
wrote is skipped, so a row that commits late with a smaller id never rewinds newer state, and
applying messages in any order converges to the in-order state. ``stamps`` is compact: ``*``
holds the id of the last message that wrote every key (a whole-state write), and a key has an
entry of its own only when it was written later than that.

A keyed list (PORT, by its POID: the open and the close time; docs/decisions.md L7, PORT entries by POID) is not one
register but one per entry identity: ``SetEntry`` writes one entry and leaves the others, and its
stamp is ``PORT/O`` or ``PORT/C``. A whole write of the list (``Replace``, ``Clear``: an ADFT
record, a snapshot) writes every identity at once; its id is the list key's own stamp (``PORT``),
which every identity without a newer stamp of its own falls back to. So a late open time never
loses to a newer close time, and any arrival order of PORT messages converges.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import date
from types import EllipsisType, MappingProxyType
from typing import cast

from msgx_engine.sis.fields import COLLECTION_BY_KEY, OBJECT_BY_KEY, PORT_IDS, SCALARS, TEXT_GROUP_BY_KEY

Entry = Mapping[str, str]
Value = str | tuple[Entry, ...] | Entry

SCALAR_KEYS = frozenset(SCALARS)
LIST_KEYS = frozenset(COLLECTION_BY_KEY) | frozenset(TEXT_GROUP_BY_KEY)
OBJECT_KEYS = frozenset(OBJECT_BY_KEY)
ALL_KEYS = SCALAR_KEYS | LIST_KEYS | OBJECT_KEYS
DELETED = "DELETED"      # stamps key of the deletion flag (deleted or restored)
BASE = "*"               # stamps key: the last message that wrote every field key
# Keys msgx derives from other flights rather than takes from a message (D30, code-share cascade: a master's MAFL from
# its live children): recomputed from the current state on every change, so never stamped or
# refused as stale (a late child's message must still re-derive its master).
DERIVED_KEYS = frozenset({"MAFL"})
Stamps = Mapping[str, int]
# Lists whose entries are registers of their own (L7): list key -> (the part naming an entry, the
# identities in the order the list keeps them; any other identity follows, sorted).
KEYED_LISTS: Mapping[str, tuple[str, tuple[str, ...]]] = MappingProxyType({"PORT": ("POID", PORT_IDS)})
ENTRY_STAMP_SEPARATOR = "/"


def entry_stamp_key(key: str, ident: str) -> str:
    """The stamps key of one entry of a keyed list: ``PORT/O``."""
    return f"{key}{ENTRY_STAMP_SEPARATOR}{ident}"


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


@dataclass(frozen=True)
class SetEntry:
    """Keyed list (``KEYED_LISTS``): the entry ``ident`` becomes ``entry``, or goes when it is None;
    the list's other entries stay (a PORT message names one POID)."""

    key: str
    ident: str
    entry: Entry | None = None


Command = Set | Clear | Replace | SetEntry


@dataclass(frozen=True)
class FlightState:
    flid: str
    fields: Mapping[str, Value] = field(default_factory=lambda: MappingProxyType({}))
    fday: date | None = None
    state_version: int = 0
    last_message_id: int | None = None
    deleted: bool = False
    # Derived, not a message field (``state.bridges``, D27, stand to airbridge): each stand the flight names -> the
    # sorted codes of the airbridges serving it; None while nothing is derived (no stand, or the
    # ABDG reference data was never loaded). ``apply`` keeps it; the writer re-derives it.
    bridges: Mapping[str, tuple[str, ...]] | None = None
    stamps: Stamps = field(default_factory=lambda: MappingProxyType({}))

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

    def stamp(self, key: str) -> int:
        """The mailbox id that last wrote ``key`` (0: none known)."""
        return stamp_of(self.stamps, key)


def stamp_of(stamps: Stamps, key: str) -> int:
    """The stamp of a field key, of the deletion flag, or of one entry of a keyed list (``PORT/O``:
    its own stamp, else the list's, else the base)."""
    if key in stamps:
        return stamps[key]
    if key == DELETED:
        return 0
    list_key, sep, _ = key.partition(ENTRY_STAMP_SEPARATOR)
    if sep:
        return stamp_of(stamps, list_key)
    return stamps.get(BASE, 0)


@dataclass(frozen=True)
class Applied:
    """The next state and what happened: ``changed`` keys differ from before; ``cleared`` is the
    subset that had a value and has none now. A Clear of an already absent key is in neither, so
    a whole-state rewrite (ADFT, snapshot) reports only what really changed in its ``msg`` event.
    ``stale`` are the keys (``DELETED`` included) a newer message had already written: skipped."""

    state: FlightState
    cleared: frozenset[str]
    changed: frozenset[str]
    stale: frozenset[str] = frozenset()

    def visible(self, before: FlightState) -> bool:
        """Whether anything a reader sees moved: the deletion flag, or a live flight's fields or
        day. Otherwise (every write equal to what is there or stale, or a deleted flight that stays
        deleted) only ``stamps`` and hidden fields move: stored without a new version or events."""
        s = self.state
        if s.deleted != before.deleted:
            # Deleted -> live is always announced (INV-29), even for a tombstone no reader ever saw
            # (FDEL of a flight never stored, then ADFT): readers learn of the flight now, at version
            # 1, not at its next change. Live -> deleted is announced only for a flight once seen.
            return not s.deleted or before.state_version > 0
        return not s.deleted and (bool(self.changed) or s.fday != before.fday)


def _validate(cmd: Command) -> None:
    kind = kind_of(cmd.key)
    if isinstance(cmd, SetEntry):
        if cmd.key not in KEYED_LISTS:
            raise ValueError(f"SetEntry on {cmd.key}, which is not a keyed list")
        if cmd.entry is not None and cmd.entry.get(KEYED_LISTS[cmd.key][0], "") != cmd.ident:
            raise ValueError(f"SetEntry {cmd.key}/{cmd.ident} with an entry of another identity")
        return
    if isinstance(cmd, Replace) and kind != "list":
        raise ValueError(f"Replace on non-list key {cmd.key}")
    if isinstance(cmd, Set) and kind == "list":
        raise ValueError(f"Set on list key {cmd.key}; use Replace")
    if isinstance(cmd, Set) and kind == "object" and not isinstance(cmd.value, Mapping):
        raise ValueError(f"object {cmd.key} needs a mapping value")
    if isinstance(cmd, Set) and kind == "scalar" and not isinstance(cmd.value, str):
        raise ValueError(f"scalar {cmd.key} needs a string value")


def apply(state: FlightState, commands: Iterable[Command], *, message_id: int | None,
          fday: date | None | EllipsisType = ..., undelete: bool = False, delete: bool = False,
          override: bool = False) -> Applied:
    """Merge commands into ``state``: absent keys untouched, Set overwrites, Clear removes,
    Replace swaps the whole list. The version always advances by one and the message is recorded.

    With a ``message_id``, last writer wins per key (see the module doc): a command on a key whose
    stamp is larger is skipped, the others stamp their key with ``message_id``; ``delete`` and
    ``undelete`` obey the ``DELETED`` stamp the same way (a flight nobody deleted or restored is
    live with stamp 0). Without a ``message_id`` (what-if evaluations) nothing is stamped or skipped.
    ``override`` (an operator's replay, which lands on top by intent): a newer key is written all
    the same and keeps its newer stamp, so later late messages are still measured against it.

    ``fday=...`` keeps the current day; a snapshot passes its day explicitly (FS §5.4).
    """
    fields = dict(state.fields)
    stamps = dict(state.stamps)
    touched: set[str] = set()
    stale: set[str] = set()
    whole: set[str] = set()         # keys written whole (every entry of a keyed list)
    for cmd in commands:
        _validate(cmd)
        if not isinstance(cmd, SetEntry):
            whole.add(cmd.key)
        if isinstance(cmd, SetEntry) or cmd.key in KEYED_LISTS:
            wrote, stale_entries = _apply_keyed(cmd, fields, stamps, message_id, override)
            touched.update([cmd.key] if wrote else [])
            stale.update(stale_entries)
            continue
        if message_id is not None and cmd.key not in DERIVED_KEYS:
            if stamp_of(stamps, cmd.key) <= message_id:
                stamps[cmd.key] = message_id
            elif not override:
                stale.add(cmd.key)
                continue
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
    deleted = state.deleted
    if delete or undelete:
        if message_id is not None and stamp_of(stamps, DELETED) > message_id and not override:
            stale.add(DELETED)
        else:
            deleted = delete
            if message_id is not None and stamp_of(stamps, DELETED) <= message_id:
                stamps[DELETED] = message_id
    if message_id is not None and whole >= ALL_KEYS:
        stamps = _compact(stamps, message_id)
    changed = {k for k in touched if fields.get(k) != state.fields.get(k)}
    cleared = {k for k in changed if k not in fields}
    next_state = replace(
        state,
        fields=MappingProxyType(dict(sorted(fields.items()))),
        state_version=state.state_version + 1,
        last_message_id=message_id,
        fday=state.fday if fday is ... else fday,
        deleted=deleted,
        stamps=MappingProxyType(dict(sorted(stamps.items()))),
    )
    return Applied(next_state, frozenset(cleared), frozenset(changed), frozenset(stale))


def apply_change(before: FlightState | None, flid: str, commands: Iterable[Command], *, message_id: int | None,
                 create: bool = True, fday: date | None | EllipsisType = ..., delete: bool = False,
                 undelete: bool = False, override: bool = False) -> Applied | None:
    """One message's change to one flight, with the rules that make arrival order irrelevant (F6):
    every field key and the deletion flag are last-writer-wins registers by mailbox id.

    - a missing flight is created by a change that may create it, and by a deletion, which
      leaves a tombstone (deleted, no fields, announced to nobody): a creating message older than
      the deletion that commits late then finds the flight deleted, as it would in id order;
    - a deleted flight still takes every message's fields (hidden: no version, no event, not in
      any read), so a restore shows the newest values and a message that arrives after a restore
      it predates lands exactly as in id order; only a restore (ADFT, a snapshot listing it) or a
      newer deletion moves the flag;
    - None (nothing to write) for a missing flight the change may neither create nor delete."""
    if before is None:
        if not (create or delete):
            return None
        before = FlightState.new(flid)
    return apply(before, commands, message_id=message_id, fday=fday, delete=delete, undelete=undelete,
                 override=override)


def _compact(stamps: dict[str, int], message_id: int) -> dict[str, int]:
    """After a message wrote every field key it did not find newer: it becomes the base, and only
    the keys written by newer messages keep an entry of their own (with their effective stamp,
    which may have come from the old base); an entry of a keyed list keeps its own stamp only
    when it is newer than the list's."""
    out = {k: v for k in ALL_KEYS if (v := stamp_of(stamps, k)) > message_id}
    for k, v in stamps.items():
        list_key, sep, _ = k.partition(ENTRY_STAMP_SEPARATOR)
        if sep and v > out.get(list_key, message_id):
            out[k] = v
    if DELETED in stamps:
        out[DELETED] = stamps[DELETED]
    out[BASE] = message_id
    return out


def keyed_entries(key: str, entries: Iterable[Mapping[str, str]]) -> tuple[Entry, ...]:
    """A keyed list as it is kept: one entry per identity (the last one given wins), the known
    identities first in their order (PORT: O, C), any other after them, sorted."""
    part, order = KEYED_LISTS[key]
    by_ident = {e.get(part, ""): freeze_entry(e) for e in entries}
    return tuple(by_ident[i] for i in _ident_order(by_ident, order))


def entry_changes(key: str, before: Iterable[Entry], after: Iterable[Entry]) -> list[SetEntry]:
    """The entries of keyed list ``key`` that differ between two lists, as ``SetEntry`` commands
    (a code-share child's PORT change passed on to its master entry by entry: C4, child changes
    reach the master; L7)."""
    part, order = KEYED_LISTS[key]
    old = {e.get(part, ""): e for e in before}
    new = {e.get(part, ""): e for e in after}
    return [SetEntry(key, i, new.get(i)) for i in _ident_order([*old, *new], order) if old.get(i) != new.get(i)]


def _ident_order(idents: Iterable[str], order: tuple[str, ...]) -> list[str]:
    present = set(idents)
    return [i for i in order if i in present] + sorted(present - set(order))


def _apply_keyed(cmd: Command, fields: dict[str, Value], stamps: dict[str, int], message_id: int | None,
                 override: bool) -> tuple[bool, set[str]]:
    """One command on a keyed list, entry by entry, last writer wins per entry (L7). Returns
    whether any entry was written and the stamp keys of the entries found newer (skipped).

    A whole write (``Replace``/``Clear``) addresses every identity: those it carries are set, all
    others (the ones present, and the ones with a stamp of their own) removed; it stamps the list
    key, and the entry stamps it supersedes are dropped, so an identity nobody names later falls
    back to it. ``SetEntry`` addresses its one identity and stamps it alone."""
    part, order = KEYED_LISTS[cmd.key]
    value = fields.get(cmd.key)
    current: dict[str, Entry] = {e.get(part, ""): e for e in value} if isinstance(value, tuple) else {}
    prefix = entry_stamp_key(cmd.key, "")
    own = [k for k in stamps if k.startswith(prefix)]
    ops: dict[str, Entry | None]
    if isinstance(cmd, SetEntry):
        ops = {cmd.ident: None if cmd.entry is None else freeze_entry(cmd.entry)}
    else:
        ops = dict.fromkeys([*current, *(k[len(prefix):] for k in own)])
        for e in getattr(cmd, "entries", ()):
            ops[e.get(part, "")] = freeze_entry(e)
    stale: set[str] = set()
    wrote = False
    for ident, entry in ops.items():
        sk = entry_stamp_key(cmd.key, ident)
        if message_id is not None and stamp_of(stamps, sk) > message_id and not override:
            stale.add(sk)
            continue
        wrote = True
        if entry is None:
            current.pop(ident, None)
        else:
            current[ident] = entry
    if message_id is not None:
        if isinstance(cmd, SetEntry):
            sk = entry_stamp_key(cmd.key, cmd.ident)
            if stamp_of(stamps, sk) <= message_id:
                stamps[sk] = message_id
        elif stamp_of(stamps, cmd.key) <= message_id:
            stamps[cmd.key] = message_id
            for k in own:
                if stamps[k] <= message_id:
                    del stamps[k]
    if current:
        fields[cmd.key] = tuple(current[i] for i in _ident_order(current, order))
    else:
        fields.pop(cmd.key, None)
    return wrote, stale


def full_state_commands(fields: Mapping[str, Value]) -> list[Command]:
    """Commands that make a state hold exactly ``fields``: every other key is cleared (D1, omitted fields cleared)."""
    cmds: list[Command] = []
    for key in sorted(ALL_KEYS):
        value = fields.get(key)
        if value is None:
            cmds.append(Clear(key))
        elif kind_of(key) == "list":
            cmds.append(Replace(key, tuple(cast("Iterable[Entry]", value))))
        else:
            cmds.append(Set(key, cast(str | Entry, value)))
    return cmds
