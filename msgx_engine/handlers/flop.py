"""FLOP handlers (dynamic line, FS §4.3): pure functions (message, current states) -> Decision.

The walking skeleton wires GTDT; the flight-state issue extends ``FLOP_HANDLERS`` to every subtype.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from lxml import etree

from msgx_engine.handlers.decision import Decision, FlightChange
from msgx_engine.handlers.extract import Unmapped, collection_entries, text_of
from msgx_engine.sis.decode import SisMessage
from msgx_engine.sis.fields import COLLECTION_BY_KEY
from msgx_engine.state.model import Clear, Command, FlightState, Replace

IDENTITY_ELEMENTS = ("FLID", "FFID")


def _collection_command(block: etree._Element, key: str) -> list[Command]:
    spec = COLLECTION_BY_KEY[key]
    elements = block.findall(key)
    if not elements:
        return []
    entries = collection_entries(elements, spec)
    return [Clear(key)] if entries is None else [Replace(key, tuple(entries))]


def _check_only(block: etree._Element, allowed: set[str]) -> None:
    for child in block:
        if isinstance(child.tag, str) and child.tag not in allowed and child.tag not in IDENTITY_ELEMENTS:
            raise Unmapped(f"FLOP/{child.tag} is not part of this subtype")


def gtdt(block: etree._Element) -> list[Command]:
    """GTDT: gate collection Replace; all GTNO="0" -> Clear; zero mixed with others -> malformed."""
    _check_only(block, {"GTDT"})
    return _collection_command(block, "GTDT")


BlockHandler = Callable[[etree._Element], list[Command]]
FLOP_HANDLERS: dict[str, BlockHandler] = {"GTDT": gtdt}


def flop_flids(msg: SisMessage) -> list[str]:
    return [text_of(b.find("FLID")) for b in msg.root.findall("FLOP")]


def handle_flop(msg: SisMessage, current: Mapping[str, FlightState]) -> Decision:
    handler = FLOP_HANDLERS.get(msg.meta.styp)
    if handler is None:
        return Decision.skip("unsupported", f"FLOP/{msg.meta.styp} has no handler")
    changes = []
    try:
        for block in msg.root.findall("FLOP"):
            flid = text_of(block.find("FLID"))
            changes.append(FlightChange(flid=flid, commands=tuple(handler(block))))
    except Unmapped as exc:
        return Decision.dead("malformed", str(exc))
    return Decision.apply(*changes)
