"""Code-share relations (INV-21/22, US-05 AC4/AC5, C-25): pure rules over loaded states.

A code-share child carries ``MAID`` = its master's FLID; the master's ``MAFL`` text group lists
its children (entries FLID/ALCD/FLNO) and is what consumers read. Deleting a child removes it
from its master's MAFL, which changes (and so notifies) the master; deleting a master deletes
every live child with it. All of it is one Decision, so one transaction: no half-deleted pair.
The loader (``FlightRepository.load_with_relatives``) reads targets, masters and children by MAID.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from msgx_engine.handlers.decision import FlightChange
from msgx_engine.state.model import FlightState, Replace


def master_of(state: FlightState) -> str | None:
    maid = state.get("MAID")
    return maid if isinstance(maid, str) and maid != state.flid else None


def _live(flights: Mapping[str, FlightState], flid: str) -> bool:
    state = flights.get(flid)
    return state is not None and not state.deleted


def without_children(master: FlightState, gone: set[str]) -> FlightChange | None:
    """The master's MAFL minus ``gone``; None if none of them was listed (nothing to notify)."""
    mafl = master.entries("MAFL")
    kept = tuple(e for e in mafl if e.get("FLID") not in gone)
    if len(kept) == len(mafl):
        return None
    return FlightChange(flid=master.flid, commands=(Replace("MAFL", kept),), create=False)


def delete_flights(targets: Iterable[str], flights: Mapping[str, FlightState],
                   children: Mapping[str, list[str]]) -> list[FlightChange]:
    """Soft-delete ``targets`` and their children; update the masters that survive.

    Missing or already deleted targets are skipped (FDEL is idempotent). Deletions come first,
    then the master updates, each flight once.
    """
    doomed: list[str] = []
    for flid in targets:
        if not _live(flights, flid) or flid in doomed:
            continue
        doomed.append(flid)
        doomed += [c for c in children.get(flid, []) if _live(flights, c) and c not in doomed]
    removals: dict[str, set[str]] = {}
    for flid in doomed:
        master = master_of(flights[flid])
        if master and master not in doomed and _live(flights, master):
            removals.setdefault(master, set()).add(flid)
    changes = [FlightChange(flid=f, commands=(), create=False, delete=True) for f in doomed]
    for master, gone in removals.items():
        change = without_children(flights[master], gone)
        if change is not None:
            changes.append(change)
    return changes

