"""Route a decoded message to its handler (DESIGN §2 step 6). Unknown kinds never block the head."""

from __future__ import annotations

from collections.abc import Mapping

from msgx_engine.handlers.decision import Decision
from msgx_engine.handlers.flop import flop_flids, handle_flop
from msgx_engine.sis.decode import SisMessage
from msgx_engine.state.model import FlightState


def target_flids(msg: SisMessage) -> list[str]:
    """Flights whose current state the handler needs (read under the writer lock)."""
    if msg.kind == "FLOP":
        return flop_flids(msg)
    return []


def decide(msg: SisMessage, current: Mapping[str, FlightState]) -> Decision:
    if msg.kind == "FLOP":
        return handle_flop(msg, current)
    return Decision.skip("unsupported", f"{msg.meta.type}/{msg.meta.styp} is not handled yet")
