"""SCHD-ADFT (FS §4.2, D21, ADFT is an increment): an ad-hoc flight record, merged like every increment.

Each FLTR is an increment (INV-14b, US-05 AC2 "missing vs explicitly empty"): a field it carries
is set, a field it carries empty is cleared, a field it does not carry keeps its value, and a
carried collection replaces that collection whole. It is not a snapshot, so D1, omitted fields cleared, does not apply.
The flight's ``fday`` is kept (NULL for a new flight: ADFT never joins a day's generation), and a
soft-deleted flight comes back (INV-29) with the record merged over what it held. ADFT is upsert
only: no generation, no diff delete, no request completion. A record that changes nothing is a
no-op (value-equal comparison, US-05 AC5). A flight it brings back that belongs to a day joins
that day's member list again (``DayMembers``, decision L8, ADFT restore and member list), so the day's next full package
can diff-delete it like any other member it leaves out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date

from lxml import etree

from msgx_engine.handlers import codeshare
from msgx_engine.handlers.changes import commands_from_values, effective
from msgx_engine.handlers.decision import Decision, FlightChange, Plan
from msgx_engine.handlers.extract import Unmapped, block_values, text_of
from msgx_engine.sis.decode import SisMessage
from msgx_engine.state.model import FlightState

# The peer refuses an ADFT/FLTR without these (carried and not empty), so we refuse it too
# (DEAD(malformed)): an ADFT also creates flights, which need their identity.
MANDATORY = ("ALCD", "FLNO", "MVIN", "SODT", "FLTY", "FLIN", "ACFT")


def adft_records(msg: SisMessage) -> list[etree._Element]:
    """The FLTR records, after the package checks: RECS (if present) equals the count, FLIDs unique."""
    schd = msg.root.findall("SCHD")
    if len(schd) != 1:
        raise Unmapped("SCHD message needs exactly one SCHD element")
    records: list[etree._Element] = []
    recs: str | None = None
    for child in schd[0]:
        if not isinstance(child.tag, str):
            continue
        if child.tag == "FLTR":
            records.append(child)
        elif child.tag == "RECS" and recs is None:
            recs = text_of(child)
        else:
            raise Unmapped(f"SCHD/{child.tag} is not in the catalogue")
    if not records:
        raise Unmapped("ADFT without a FLTR record")
    if recs is not None and recs != str(len(records)):
        raise Unmapped(f"RECS={recs} but {len(records)} FLTR record(s) present")
    flids = [record_flid(r) for r in records]
    if len(set(flids)) != len(flids):
        raise Unmapped("ADFT repeats a FLID")
    return records


def record_flid(record: etree._Element) -> str:
    flids = record.findall("FLID")
    if len(flids) != 1 or not text_of(flids[0]):
        raise Unmapped("FLTR needs exactly one non-empty FLID")
    return text_of(flids[0])


def adft_flids(msg: SisMessage) -> list[str]:
    return [text_of(r.find("FLID")) for r in msg.root.iterfind("SCHD/FLTR") if text_of(r.find("FLID"))]


def record_change(record: etree._Element) -> FlightChange:
    """One FLTR as an increment (D21): commands for what it carries, and it restores (INV-29)."""
    values = block_values(record)
    missing = [k for k in MANDATORY if not values.get(k)]
    if missing:
        raise Unmapped(f"ADFT record lacks mandatory {','.join(missing)}")
    commands = codeshare.strip_derived(commands_from_values(values))     # MAFL is derived (D30, code-share cascade)
    return FlightChange(flid=record_flid(record), commands=tuple(commands), undelete=True)


@dataclass(frozen=True)
class DayMembers(Plan):
    """(day, FLID) pairs to add to the days' snapshot member lists (``schd_gen_flid``), kept if
    already there: the flights an ADFT restores that a day owns (decision L8). A snapshot's diff
    delete took them off the list; back on it, the day's next full package that leaves them out
    deletes them again."""

    members: tuple[tuple[date, str], ...]


def rejoined_members(changes: Iterable[FlightChange], current: Mapping[str, FlightState]
                     ) -> tuple[tuple[date, str], ...]:
    """The restored flights with a day: each deleted flight a record brings back keeps its
    ``fday`` (an ADFT never moves a flight to a day), so it belongs in that day's list."""
    out: list[tuple[date, str]] = []
    for change in changes:
        before = current.get(change.flid)
        if before is not None and before.deleted and before.fday is not None:
            out.append((before.fday, change.flid))
    return tuple(out)


def handle_adft(msg: SisMessage, current: Mapping[str, FlightState]) -> Decision:
    try:
        changes = [record_change(r) for r in adft_records(msg)]
    except Unmapped as exc:
        return Decision.dead("malformed", str(exc))
    kept = [c for c in (effective(ch, current.get(ch.flid)) for ch in changes) if c]
    members = rejoined_members(kept, current)
    return Decision.apply(*kept, plans=(DayMembers(members),) if members else ())
