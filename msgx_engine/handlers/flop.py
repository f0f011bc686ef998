"""FLOP handlers (dynamic line, FS §4.3): pure functions (message, current states) -> Decision.

Every FLOP subtype has the same shape: identity (FLID, FFID) plus the payload elements the
subtype names. So one table says which elements each subtype may carry, and one handler turns
them into commands (D7, empty elements clear, clear rules live in ``extract``/``changes``). The table is derived from
the field catalogue: a subtype per scalar (including the FLTR-only ones ESTT, ACTT, PAXC, CSOP, CSFT,
MAID ...), the grouped subtypes (EXSS, HNAG, TAOP, VIPP), one per collection, exception object
and text group. FDEL is the one subtype with its own semantics (soft delete with the code-share
cascade, ``codeshare``). Per-subtype behaviour is documented in docs/flop-subtypes.md.
"""

from __future__ import annotations

from collections.abc import Mapping

from lxml import etree

from msgx_engine.handlers import codeshare
from msgx_engine.handlers.changes import commands_from_values, effective, group_by_flid
from msgx_engine.handlers.decision import Decision, FlightChange
from msgx_engine.handlers.extract import Unmapped, block_values, is_empty, text_of
from msgx_engine.sis.decode import SisMessage
from msgx_engine.sis.fields import (
    COLLECTION_BY_KEY,
    GROUPED_SCALAR_SUBTYPES,
    OBJECT_BY_KEY,
    PORT_IDS,
    SCALARS,
    TEXT_GROUP_BY_KEY,
)
from msgx_engine.state.model import ALL_KEYS, Command, FlightState, Replace, Set, SetEntry, freeze_entry

IDENTITY_ELEMENTS = ("FLID", "FFID")
FDEL = "FDEL"


def _subtype_table() -> dict[str, tuple[str, ...]]:
    grouped_members = {m for members in GROUPED_SCALAR_SUBTYPES.values() for m in members}
    table: dict[str, tuple[str, ...]] = {
        name: (name,) for name in SCALARS if name != "FFID" and name not in grouped_members}
    table.update(GROUPED_SCALAR_SUBTYPES)
    for key in (*COLLECTION_BY_KEY, *OBJECT_BY_KEY, *TEXT_GROUP_BY_KEY):
        table[key] = (key,)
    return dict(sorted(table.items()))


# STYP -> the payload elements a block of that subtype may carry (besides FLID/FFID).
SUBTYPE_ELEMENTS: dict[str, tuple[str, ...]] = _subtype_table()
SUPPORTED_SUBTYPES: frozenset[str] = frozenset(SUBTYPE_ELEMENTS) | {FDEL}


def _check_block(block: etree._Element, styp: str, allowed: tuple[str, ...]) -> None:
    """Nothing in a block is dropped silently (G-FLOP-UNMAPPED): stray text, attributes and any
    element outside the subtype make the message malformed, naming what was found."""
    if any(not k.startswith("{") for k in block.attrib):
        raise Unmapped(f"FLOP carries attributes {sorted(block.attrib)}")
    if (block.text or "").strip():
        raise Unmapped(f"FLOP carries stray text {block.text.strip()[:40]!r}")
    for child in block:
        if (child.tail or "").strip():
            raise Unmapped(f"FLOP carries stray text {child.tail.strip()[:40]!r}")
        if not isinstance(child.tag, str) or child.tag in IDENTITY_ELEMENTS or child.tag in allowed:
            continue
        if child.tag in ALL_KEYS:
            raise Unmapped(f"FLOP/{child.tag} is not part of subtype {styp}")
        raise Unmapped(f"FLOP/{child.tag} is not in the catalogue")


def block_flid(block: etree._Element) -> str:
    flids = block.findall("FLID")
    if len(flids) != 1 or not text_of(flids[0]):
        raise Unmapped("FLOP block needs exactly one non-empty FLID")
    return text_of(flids[0])


def block_commands(block: etree._Element, styp: str) -> list[Command]:
    """The commands one block of subtype ``styp`` asks for; [] when it carries no payload (TOBT/01)
    or only a derived field (MAFL: checked, then left to its derivation, D30, code-share cascade)."""
    allowed = SUBTYPE_ELEMENTS[styp]
    _check_block(block, styp, allowed)
    cmds = codeshare.strip_derived(commands_from_values(block_values(block, skip=IDENTITY_ELEMENTS)))
    if not cmds:
        return []
    ffid = text_of(block.find("FFID"))
    return ([Set("FFID", ffid)] if ffid else []) + cmds


def port_by_poid(cmds: list[Command]) -> list[Command]:
    """PORT sets only the entry of its own POID, so the open (O) and close (C) times stay side by
    side as the peer keeps them; an entry without POTM clears that POID (peer rule), an empty PORT
    element clears both. Each POID is its own last-writer register (``SetEntry``, decision L7, PORT entries by POID):
    the merge happens in the state model, by mailbox id, not here against the state the message found,
    so an older open time that arrives after a newer close time still lands."""
    out: list[Command] = []
    for cmd in cmds:
        if not (isinstance(cmd, Replace) and cmd.key == "PORT"):
            out.append(cmd)
            continue
        for entry in cmd.entries:
            poid = entry.get("POID", "")
            if poid not in PORT_IDS:
                raise Unmapped(f"PORT POID={poid!r} is not one of {'/'.join(PORT_IDS)}")
            out.append(SetEntry("PORT", poid, freeze_entry(entry) if entry.get("POTM") else None))
    return out


def flop_blocks(msg: SisMessage) -> list[etree._Element]:
    blocks = msg.root.findall("FLOP")
    if not blocks:
        raise Unmapped("FLOP message without a FLOP block")
    return blocks


def flop_flids(msg: SisMessage) -> list[str]:
    """FLIDs for the loader; malformed blocks are reported by the decider, not here."""
    return [text_of(b.find("FLID")) for b in msg.root.findall("FLOP") if text_of(b.find("FLID"))]


def handle_flop(msg: SisMessage, current: Mapping[str, FlightState]) -> Decision:
    """Every non-FDEL subtype: absent = unchanged, present = Set/Replace, empty = Clear (D7).

    An unknown FLID creates the flight (fday NULL, FS §5.4); a soft-deleted one is left alone.
    """
    styp = msg.meta.styp
    if styp not in SUBTYPE_ELEMENTS:
        return Decision.skip("unsupported", f"FLOP/{styp} has no handler")
    try:
        grouped = group_by_flid((block_flid(b), block_commands(b, styp)) for b in flop_blocks(msg))
        grouped = {flid: port_by_poid(cmds) for flid, cmds in grouped.items()}
    except Unmapped as exc:
        return Decision.dead("malformed", str(exc))
    changes = [effective(FlightChange(flid=flid, commands=tuple(cmds)), current.get(flid))
               for flid, cmds in grouped.items() if cmds]
    return Decision.apply(*(c for c in changes if c is not None))


def fdel_targets(msg: SisMessage) -> list[str]:
    """FLIDs an FDEL message deletes; the FDEL marker must be present and empty (peer rule)."""
    targets: list[str] = []
    for block in flop_blocks(msg):
        _check_block(block, FDEL, (FDEL,))
        markers = block.findall(FDEL)
        if len(markers) != 1 or not is_empty(markers[0]):
            raise Unmapped("FDEL block needs exactly one empty <FDEL> marker")
        flid = block_flid(block)
        if flid not in targets:
            targets.append(flid)
    return targets


def handle_fdel(msg: SisMessage, current: Mapping[str, FlightState], children: codeshare.Children) -> Decision:
    """Soft delete with the code-share cascade (D2, INV-21/22, C-25); a missing target is a no-op.
    The masters of deleted children are refreshed by the pipeline's MAFL derivation (D30)."""
    try:
        targets = fdel_targets(msg)
    except Unmapped as exc:
        return Decision.dead("malformed", str(exc))
    return Decision.apply(*codeshare.delete_flights(targets, current, children))
