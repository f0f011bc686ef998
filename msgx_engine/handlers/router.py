"""Route a decoded message to its handler (DESIGN §2 step 6). Unknown kinds never block the head.

A route has two parts: ``load`` reads, under the writer lock, what the handler needs (current
flight states, ledger rows, open requests: a ``Context``), and ``decide`` is the pure handler.
Each message line registers its route in ``ROUTES`` keyed by (TYPE, STYP), (TYPE, "*") or
(kind, "*"); the most specific key wins.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sqlalchemy import Connection

from msgx_engine.handlers import reference, seasons, snapshot
from msgx_engine.handlers.adft import adft_flids, handle_adft
from msgx_engine.handlers.decision import Decision
from msgx_engine.handlers.flop import flop_flids, handle_fdel, handle_flop
from msgx_engine.sis.decode import SisMessage
from msgx_engine.state.model import FlightState
from msgx_engine.store.flights import FlightRepository
from msgx_engine.store.ledger import SnapshotWrite, load_snapshot
from msgx_engine.store.reference import ReferenceWrite, load_reference
from msgx_engine.store.seasons import SeasonReplace


@dataclass
class Context:
    """Everything a handler may read: loaded under the lock in transaction 1, then frozen by use."""

    flights: dict[str, FlightState] = field(default_factory=dict)
    extra: dict[str, object] = field(default_factory=dict)


Loader = Callable[[Connection, SisMessage], Context]
Handler = Callable[[SisMessage, Context], Decision]


@dataclass(frozen=True)
class Route:
    load: Loader
    decide: Handler


def load_flights(flids_of: Callable[[SisMessage], list[str]]) -> Loader:
    def load(conn: Connection, msg: SisMessage) -> Context:
        return Context(flights=FlightRepository(conn).load(flids_of(msg), for_update=True))

    return load


def _flop(msg: SisMessage, ctx: Context) -> Decision:
    return handle_flop(msg, ctx.flights)


def _load_fdel(conn: Connection, msg: SisMessage) -> Context:
    """FDEL needs the targets' code-share masters and children too (INV-21/22)."""
    flights, children = FlightRepository(conn).load_with_relatives(flop_flids(msg))
    return Context(flights=flights, extra={"children": children})


def _fdel(msg: SisMessage, ctx: Context) -> Decision:
    return handle_fdel(msg, ctx.flights, ctx.extra.get("children", {}))  # type: ignore[arg-type]


def _adft(msg: SisMessage, ctx: Context) -> Decision:
    return handle_adft(msg, ctx.flights)


def _load_snapshot(conn: Connection, msg: SisMessage) -> Context:
    return Context(extra=load_snapshot(conn, msg))


def _snapshot(msg: SisMessage, ctx: Context) -> Decision:
    return snapshot.decide(msg, ctx.extra, SnapshotWrite)


def _season(msg: SisMessage, ctx: Context) -> Decision:
    return seasons.decide(msg, SeasonReplace)


def _load_reference(conn: Connection, msg: SisMessage) -> Context:
    return Context(extra=load_reference(conn, msg))


def _reference(msg: SisMessage, ctx: Context) -> Decision:
    return reference.decide(msg, ctx.extra, ReferenceWrite)


ROUTES: dict[tuple[str, str], Route] = {
    ("SCHD", "DNLD"): Route(_load_snapshot, _snapshot),
    ("SCHD", "RESP"): Route(_load_snapshot, _snapshot),
    ("SCHS", "DNLD"): Route(lambda conn, msg: Context(), _season),
    ("SCHS", "RESP"): Route(lambda conn, msg: Context(), _season),
    ("FLOP", "*"): Route(load_flights(flop_flids), _flop),
    ("FLOP", "FDEL"): Route(_load_fdel, _fdel),
    ("SCHD", "ADFT"): Route(load_flights(adft_flids), _adft),
    ("REF", "*"): Route(_load_reference, _reference),       # the 23 reference types (D17)
}


def route_for(msg: SisMessage) -> Route | None:
    for key in ((msg.meta.type, msg.meta.styp), (msg.meta.type, "*"), (msg.kind, "*")):
        route = ROUTES.get(key)
        if route is not None:
            return route
    return None


def prepare(conn: Connection, msg: SisMessage) -> Context:
    route = route_for(msg)
    return route.load(conn, msg) if route else Context()


def decide(msg: SisMessage, ctx: Context) -> Decision:
    route = route_for(msg)
    if route is None:
        return Decision.skip("unsupported", f"{msg.meta.type}/{msg.meta.styp} is not handled")
    return route.decide(msg, ctx)


def current_flights(ctx: Context) -> Mapping[str, FlightState]:
    return ctx.flights
