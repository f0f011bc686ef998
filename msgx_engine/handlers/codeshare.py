"""Code-share relations (D30, code-share cascade; INV-21/22, US-05 AC4/AC5, C-25): pure rules over loaded states.

A code-share child carries ``MAID`` = its master's FLID; that column is the one authority for the
relation. The master's ``MAFL`` text group (entries FLID/ALCD/FLNO) is **derived** from it: the
live children, each with its own ALCD and FLNO, ordered by FLID. So:

- deleting a master deletes its live children in the same Decision, hence the same transaction
  (``delete_flights``: FDEL; the snapshot's diff delete applies ``cascade`` to its plan);
- a child's create, restore, delete, MAID change or ALCD/FLNO change re-derives the MAFL of the
  masters it left and joined, and a master created or restored gets the MAFL of the children
  already waiting for it (``refresh_masters``). A master whose MAFL changes is written like any
  changed flight: new version, ``msg`` and ``schd`` events, projection;
- a child's own change to any field but those describing the marketing flight (gates, stands,
  times, ...) is applied to its master too, which is then announced instead of the child
  (``notify_masters``; decision C4, child changes reach the master, US-05 AC4): the child keeps its ``schd`` state, its
  ``msg`` is its master's; the master's own record in the same message wins (``own_record_wins``);
- a deletion msgx decides itself never leaves a live child of a deleted master: a snapshot keeps
  a master whose child stays (``snapshot.held_masters``), archiving retires a master only with
  its children (decision L5, master kept for a live child);
- a MAFL carried by a message (FLOP MAFL, ADFT, snapshot FLTR) is not stored (``DERIVED``): what
  consumers read must follow the children msgx holds, and no message that does not carry MAFL
  (a snapshot clears what it omits, D1, omitted fields cleared) may clear it. docs/decisions.md C1, derived MAFL,
  records this.

Nothing here reads the store: the route loads the children (``ChildRef``) of every flight whose
MAFL may change, and the flights it refreshes, under the writer lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from msgx_engine.handlers.decision import FlightChange
from msgx_engine.state.model import (
    ALL_KEYS,
    KEYED_LISTS,
    Clear,
    Command,
    Entry,
    FlightState,
    Replace,
    Set,
    entry_changes,
    freeze_entry,
    kind_of,
)

MAFL = "MAFL"
DERIVED: frozenset[str] = frozenset({MAFL})   # fields msgx derives; a message never sets them
_IDENTITY = ("MAID", "ALCD", "FLNO")          # what a child contributes to its master's MAFL
# The fields that describe the marketing flight, never passed on to its master (decision C4,
# docs/flop-subtypes.md "FDEL and the code-share cascade"): its identity (the FFID parts and its
# airline's subcompany), its links to other flights by its own numbering (MAID, the derived MAFL,
# the code-share operator and flight CSOP/CSFT, the transit connection TAOP/TAFL/TAID) and what is
# counted under its own number (passengers PAXC, local bags LBNO/LBWT). Every other field of a
# child describes the one operated flight, which the master stands for.
OWN_KEYS: frozenset[str] = frozenset({
    "FFID", "ALCD", "FLNO", "MVIN", "SODT", "FLIN", "ALSC",
    "MAID", MAFL, "CSOP", "CSFT", "TAOP", "TAFL", "TAID",
    "PAXC", "LBNO", "LBWT"})
SHARED_KEYS: frozenset[str] = ALL_KEYS - OWN_KEYS


@dataclass(frozen=True)
class ChildRef:
    """A live code-share child as its master's MAFL lists it."""

    flid: str
    alcd: str | None = None
    flno: str | None = None

    @staticmethod
    def of(state: FlightState) -> ChildRef:
        alcd, flno = state.get("ALCD"), state.get("FLNO")
        return ChildRef(state.flid, alcd if isinstance(alcd, str) else None, flno if isinstance(flno, str) else None)


Children = Mapping[str, Sequence[ChildRef]]     # master FLID -> its live children as stored


def flid_order(flid: str) -> tuple[int, str]:
    """FLIDs in numeric order (they are digit strings), deterministic for any other string."""
    return len(flid), flid


def master_of(state: FlightState | None) -> str | None:
    """The master a live child points at (None for a deleted flight or a non-child)."""
    if state is None or state.deleted:
        return None
    maid = state.get("MAID")
    return maid if isinstance(maid, str) and maid and maid != state.flid else None


def _live(state: FlightState | None) -> bool:
    return state is not None and not state.deleted


def strip_derived(commands: Iterable[Command]) -> list[Command]:
    """A message's commands without the derived fields (see the module doc)."""
    return [c for c in commands if c.key not in DERIVED]


def mafl(children: Iterable[ChildRef]) -> tuple[Entry, ...]:
    """The derived MAFL: one entry per live child, ordered by FLID (numerically for digit FLIDs)."""
    entries = []
    for ref in sorted(children, key=lambda r: flid_order(r.flid)):
        entry = {"FLID": ref.flid}
        if ref.alcd:
            entry["ALCD"] = ref.alcd
        if ref.flno:
            entry["FLNO"] = ref.flno
        entries.append(freeze_entry(entry))
    return tuple(entries)


# --- which masters a message touches ------------------------------------------------------------
def touched_masters(before: FlightState | None, after: FlightState) -> set[str]:
    """Masters whose MAFL a flight's transition may change: the one it left and the one it joined,
    when it came to life, died, or changed MAID, ALCD or FLNO."""
    old, new = master_of(before), master_of(after)
    if old is None and new is None:
        return set()
    same = (before is not None and _live(before) == _live(after)
            and all(before.get(k) == after.get(k) for k in _IDENTITY))
    return set() if same else {m for m in (old, new) if m}


def may_touch_masters(changes: Iterable[FlightChange], flights: Mapping[str, FlightState]) -> bool:
    """A cheap first look (no state is computed): can these changes touch any master's MAFL? Only
    a change to a child, to MAID, or one that creates or restores a flight can."""
    for change in changes:
        before = flights.get(change.flid)
        if (before is None or before.deleted or master_of(before) is not None
                or any(c.key == "MAID" for c in change.commands)):
            return True
    return False


def masters_to_derive(transitions: Mapping[str, tuple[FlightState | None, FlightState]]) -> set[str]:
    """Every flight whose MAFL this message may change: the masters its children touched, and
    every flight it created or restored (children may already point at it)."""
    wanted: set[str] = set()
    for flid, (before, after) in transitions.items():
        wanted |= touched_masters(before, after)
        if _live(after) and not _live(before):
            wanted.add(flid)
    return wanted


AfterChildren = Mapping[str, Sequence[ChildRef]]   # master FLID -> the message's flights that are its live children


def children_after(after: Mapping[str, FlightState]) -> dict[str, list[ChildRef]]:
    """The message's flights (``after``) that are live children, by master: built once per
    message, so deriving every master's MAFL is linear in the flights (a 10,000-flight snapshot
    derives 10,000), not quadratic."""
    index: dict[str, list[ChildRef]] = {}
    for state in after.values():
        master = master_of(state)
        if master is not None:
            index.setdefault(master, []).append(ChildRef.of(state))
    return index


def derived_mafl(master: str, stored: Children, after: Mapping[str, FlightState],
                 after_children: AfterChildren) -> tuple[Entry, ...]:
    """``master``'s MAFL once the message's flights (``after``) are written: its stored live
    children the message did not touch, plus the message's flights that are its live children
    (``after_children``: ``children_after(after)``)."""
    refs = {r.flid: r for r in stored.get(master, ()) if r.flid not in after}
    refs.update((r.flid, r) for r in after_children.get(master, ()))
    return mafl(refs.values())


# --- the change path (FLOP, FDEL, ADFT) ------------------------------------------------------------
def refresh_masters(transitions: Mapping[str, tuple[FlightState | None, FlightState]],
                    flights: Mapping[str, FlightState], stored: Children) -> list[FlightChange]:
    """MAFL changes for every master the message touched (D30): a ``Replace`` with its derived
    MAFL. ``flights`` are the stored states the route loaded; ``stored`` the live children of
    each master. A master the message writes gets the change only where its MAFL after the message
    differs, and none when the message deletes it; a master not loaded gets it unconditionally
    (``create=False``: the pipeline loads it and drops the change if it is missing, deleted or
    already right). A flight whose children were not read is left alone."""
    after = {f: a for f, (_, a) in transitions.items()}
    after_children = children_after(after)
    changes = []
    for master in sorted(masters_to_derive(transitions), key=flid_order):
        if master not in stored:
            continue
        derived = derived_mafl(master, stored, after, after_children)
        state = after.get(master) or flights.get(master)
        if state is not None and (state.deleted or derived == state.entries(MAFL)):
            continue
        changes.append(FlightChange(flid=master, commands=(Replace(MAFL, derived),), create=False))
    return changes


def delete_flights(targets: Iterable[str], flights: Mapping[str, FlightState],
                   children: Children) -> list[FlightChange]:
    """Soft-delete the ``targets`` and every live child of theirs (C-25, INV-21/22).

    Each flight is deleted once. A missing or already deleted target still gets its deletion (a
    tombstone or a re-stamped flag, invisible to readers: FDEL stays idempotent), so a late
    message older than the deletion cannot bring the flight back (last writer wins, F6); its
    live children, stored with ``MAID`` naming it before it was ever stored or after it was
    deleted, go with it as a live master's do, each a visible deletion (decision C3, FDEL cascade): no live
    child is left pointing at a master the AODB deleted. The children come from ``children``
    (live when read); the pipeline loads their states. The masters of deleted children are
    refreshed by ``refresh_masters`` afterwards."""
    doomed: list[str] = []
    for flid in targets:
        if flid in doomed:
            continue
        doomed.append(flid)
        doomed += [c for c in cascade([flid], children) if c not in doomed]
    return [FlightChange(flid=f, commands=(), create=False, delete=True) for f in doomed]


def cascade(masters: Iterable[str], children: Children) -> list[str]:
    """The live children deleted with ``masters`` (C-25), in FLID order per master."""
    return [r.flid for m in masters for r in sorted(children.get(m, ()), key=lambda r: flid_order(r.flid))]


# --- a child's own changes go to its master (decision C4; US-05 AC4) --------------------------------
def may_notify_masters(changes: Iterable[FlightChange], flights: Mapping[str, FlightState]) -> bool:
    """A cheap first look: does the message change a flight stored as a live code-share child?"""
    return any(master_of(flights.get(change.flid)) is not None for change in changes)


def _stays_child(before: FlightState | None, after: FlightState) -> str | None:
    """The master of a flight that was and stays its live child (None otherwise): a child created,
    restored, deleted or moved is announced by its own events and its masters' MAFL (D30)."""
    master = master_of(after)
    return master if master is not None and master_of(before) == master else None


def shared_commands(before: FlightState, after: FlightState) -> tuple[Command, ...]:
    """The child's changes to the fields it shares with its master, as commands on the master."""
    commands: list[Command] = []
    for key in sorted(SHARED_KEYS):
        value = after.get(key)
        if value == before.get(key):
            continue
        if key in KEYED_LISTS:      # entry by entry, so each keeps its own last writer (L7, PORT entries by POID)
            commands += entry_changes(key, before.entries(key), after.entries(key))
        elif value is None:
            commands.append(Clear(key))
        elif kind_of(key) == "list":
            commands.append(Replace(key, value if isinstance(value, tuple) else ()))
        else:
            commands.append(Set(key, value if not isinstance(value, tuple) else ""))
    return tuple(commands)


def masters_to_notify(transitions: Mapping[str, tuple[FlightState | None, FlightState]]) -> set[str]:
    """The masters whose live children the message changed in a shared field."""
    return {m for before, after in transitions.values()
            if (m := _stays_child(before, after)) is not None and before is not None
            and shared_commands(before, after)}


def notify_masters(transitions: Mapping[str, tuple[FlightState | None, FlightState]],
                   flights: Mapping[str, FlightState], loaded: object = None) -> list[FlightChange]:
    """A child's own change (gates, times, ...) updates its master (decision C4, US-05 AC4): the
    same change to every shared field, as a ``create=False`` change the pipeline loads and writes
    like any other (last writer wins by mailbox id, F6): the master gets a new version, its ``msg``
    and ``schd`` events and its projection when that changes what it holds, nothing when it holds
    those values already. A master the message deletes, or that is missing or deleted, takes
    nothing visible. Children in FLID order, so two children of one master apply in a fixed order."""
    changes = []
    for flid in sorted(transitions, key=flid_order):
        before, after = transitions[flid]
        master = _stays_child(before, after)
        if master is None or before is None:
            continue
        target = transitions.get(master)
        if target is not None and target[1].deleted:
            continue
        commands = shared_commands(before, after)
        if commands:
            changes.append(FlightChange(flid=master, commands=commands, create=False))
    return changes


def own_record_wins(changes: Sequence[FlightChange], derived: Iterable[FlightChange]) -> list[FlightChange]:
    """``derived`` without the keys a flight's own change in the same message carries (decision
    C4): the master's own record (an ADFT record, a FLOP block) says what it holds, and a child's
    change passed on to it never overrides that, whichever comes first in the message. A derived
    change left with no command is dropped."""
    own = {c.flid: {cmd.key for cmd in c.commands} for c in changes}
    kept: list[FlightChange] = []
    for change in derived:
        carried = own.get(change.flid)
        if carried:
            commands = tuple(cmd for cmd in change.commands if cmd.key not in carried)
            if not commands:
                continue
            change = replace(change, commands=commands)
        kept.append(change)
    return kept


def announced_by_master(before: FlightState | None, after: FlightState, current: Mapping[str, FlightState]) -> bool:
    """Whether a child's visible change is announced on its master's ``msg`` instead of its own
    (decision C4: no code-share notification of its own): it was and stays a live child of a live
    master the message also writes. Its ``schd`` whole state is still published."""
    master = _stays_child(before, after)
    target = current.get(master) if master is not None else None
    return target is not None and not target.deleted
