"""Route a decoded message to its handler (DESIGN §2 step 6). Unknown kinds never block the head.

A route has two parts: ``load`` reads, under the writer lock in transaction 1, what the handler
needs and returns it as the route's typed context (current flight states, the snapshot ledger,
the open request a RESP answers, ...); ``decide`` is the pure handler, called once with it. Each
message line registers its route in ``ROUTES`` keyed by (TYPE, STYP), (TYPE, "*") or (kind, "*");
the most specific key wins.

The loaders are the only place where the pure handlers meet the store: they call the handlers'
pure outline helpers to know what to read, and the store's batched reads to read it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sqlalchemy import Connection

from msgx_engine.handlers import eror, reference, seasons, snapshot
from msgx_engine.handlers.adft import adft_flids, handle_adft
from msgx_engine.handlers.answers import OpenRequest, select_request
from msgx_engine.handlers.changes import FlightsContext
from msgx_engine.handlers.decision import Decision
from msgx_engine.handlers.flop import flop_flids, handle_fdel, handle_flop
from msgx_engine.pipeline.derived import BeforeRead, no_hold, refresh_derived
from msgx_engine.pipeline.large_bodies import package_split
from msgx_engine.sis.decode import SisMessage
from msgx_engine.state.model import FlightState
from msgx_engine.store import ledger
from msgx_engine.store import seasons as season_store
from msgx_engine.store.flights import FlightRepository
from msgx_engine.store.requests import answer_candidates, inflight_requests, registered_at, sent_requests
from msgx_engine.store.version_floor import floors_of

C = TypeVar("C")


@dataclass(frozen=True)
class Route(Generic[C]):
    """``load`` (under the lock) then ``decide`` (pure). ``flights`` names the loaded states the
    decision's flight changes apply to (none for the lines that write plans only). A route whose
    whole context is the states of the flights ``flids`` names can take them read ahead
    (``decide``'s ``preloaded``, P11, read-ahead) instead of loading them itself."""

    load: Callable[[Connection, SisMessage, int], C]
    decide: Callable[[SisMessage, C], Decision]
    flights: Callable[[C], Mapping[str, FlightState]] = field(default=lambda ctx: {})
    flids: Callable[[SisMessage], list[str]] | None = None


@dataclass(frozen=True)
class Routed:
    """The decision and the current states (as loaded under the lock) its flight changes apply to."""

    decision: Decision
    flights: Mapping[str, FlightState]


# --- loaders -----------------------------------------------------------------------------------
def load_flights(flids_of: Callable[[SisMessage], list[str]]) -> Callable[[Connection, SisMessage, int],
                                                                           FlightsContext]:
    def load(conn: Connection, msg: SisMessage, msg_id: int) -> FlightsContext:
        return FlightsContext(FlightRepository(conn).load(flids_of(msg), for_update=True))

    return load


def load_fdel(conn: Connection, msg: SisMessage, msg_id: int) -> FlightsContext:
    """FDEL also needs the targets' live code-share children (C-25: deleted with a master)."""
    repo = FlightRepository(conn)
    targets = flop_flids(msg)
    return FlightsContext(repo.load(targets, for_update=True), repo.codeshare_children(targets))


def load_snapshot(conn: Connection, msg: SisMessage, msg_id: int) -> snapshot.SnapshotContext:
    """SCHD DNLD/RESP, read in a constant number of statements (no row locks needed: the pipeline
    lock already serialises every writer; the ledger's version CAS catches any that is not)."""
    try:
        pkg = snapshot.outline(msg)
    except snapshot.PackageRejected as exc:
        return snapshot.SnapshotContext(msg_id, rejected=exc)
    day, request, refusal = pkg.day, None, None
    sent: tuple[OpenRequest, ...] = ()
    if msg.meta.styp == "RESP":       # the RQFD of the package's own day in flight when it came (D23, a RESP's day,
                                      # C-23)
        sent = sent_requests(conn, "RQFD")
        request, refusal = snapshot.answered_request(msg, pkg, answer_candidates(conn, "RQFD"),
                                                     registered_at(conn, msg_id))
        day = request.fday if request else None
    if day is None:
        return snapshot.SnapshotContext(msg_id, pkg, request=request, sent=sent, refusal=refusal)
    day_ledger = ledger.read_ledger(conn, day)
    heads = ledger.read_heads(conn, snapshot.flids_to_read(pkg, day_ledger.members))
    repo = FlightRepository(conn)
    children = repo.codeshare_children(snapshot.children_to_read(pkg, day_ledger.members, heads))
    newer = [f for f in pkg.flids if f in heads and heads[f].newest > msg_id]   # rare: a late snapshot (F6, last writer
                                                                                # wins)
    return snapshot.SnapshotContext(msg_id, pkg, request=request, sent=sent, ledger=day_ledger, heads=heads,
                                    children=children, newer=repo.load(newer) if newer else {},
                                    flights=package_split.prepared_flights(msg, pkg.flids),
                                    floors=floors_of(conn, [f for f in pkg.flids if f not in heads]))


def load_reference(conn: Connection, msg: SisMessage, msg_id: int) -> reference.ReferenceContext:
    """A RESP's RQRD for its type, in flight when it came (D16, request lifecycle, C-23); other subtypes need nothing
    from the store."""
    if msg.meta.styp != "RESP":
        return reference.ReferenceContext()
    request, refusal = select_request(msg, "RQRD", answer_candidates(conn, "RQRD", msg.meta.type),
                                      registered_at(conn, msg_id))
    return reference.ReferenceContext(request, refusal)


def load_season(conn: Connection, msg: SisMessage, msg_id: int) -> seasons.SeasonContext:
    key = seasons.season_key(msg)
    return seasons.SeasonContext(msg_id, season_store.last_message_id(conn, key) if key else None)


def load_eror(conn: Connection, msg: SisMessage, msg_id: int) -> eror.ErorContext:
    """The requests in flight an EROR may answer (C-24, D28)."""
    return eror.ErorContext(inflight_requests(conn))


def _flights(ctx: FlightsContext) -> Mapping[str, FlightState]:
    return ctx.flights


# --- the table -----------------------------------------------------------------------------------
_FLOP = Route(load_flights(flop_flids), lambda msg, ctx: handle_flop(msg, ctx.flights), _flights, flop_flids)
_FDEL = Route(load_fdel, lambda msg, ctx: handle_fdel(msg, ctx.flights, ctx.children), _flights)
_ADFT = Route(load_flights(adft_flids), lambda msg, ctx: handle_adft(msg, ctx.flights), _flights, adft_flids)
_SNAPSHOT = Route(load_snapshot, snapshot.decide)
_SEASON = Route(load_season, seasons.decide)
_REFERENCE = Route(load_reference, reference.decide)
_EROR = Route(load_eror, eror.decide)

ROUTES: dict[tuple[str, str], Route[Any]] = {
    ("SCHD", "DNLD"): _SNAPSHOT,
    ("SCHD", "RESP"): _SNAPSHOT,
    ("SCHS", "DNLD"): _SEASON,
    ("SCHS", "RESP"): _SEASON,
    ("FLOP", "*"): _FLOP,
    ("FLOP", "FDEL"): _FDEL,
    ("SCHD", "ADFT"): _ADFT,
    ("REF", "*"): _REFERENCE,       # the 23 reference types (D17, reference categories)
    ("EROR", "*"): _EROR,           # a request of ours failed (D28)
}


def route_for(msg: SisMessage) -> Route[Any] | None:
    for key in ((msg.meta.type, msg.meta.styp), (msg.meta.type, "*"), (msg.kind, "*")):
        route = ROUTES.get(key)
        if route is not None:
            return route
    return None


def preloadable_flids(msg: SisMessage) -> list[str] | None:
    """The flights whose states are the message's whole context (None: its route loads more)."""
    route = route_for(msg)
    return route.flids(msg) if route is not None and route.flids is not None else None


def decide(conn: Connection, msg: SisMessage, msg_id: int,
           preloaded: Mapping[str, FlightState | None] | None = None,
           before_read: BeforeRead = no_hold) -> Routed:
    """Load the route's context under the lock, call its pure decider once, then refresh the
    derived fields the decision touches (``pipeline.derived``: the MAFL of D30, code-share cascade); an unknown
    TYPE/STYP is SKIPPED(unsupported) (D8, unsupported types, INV-30). ``preloaded``: flight states read ahead
    under the lock in this transaction (None: not stored), used when they cover the message.
    ``before_read`` runs before any statement that reads the store (P13, write-behind)."""
    route = route_for(msg)
    if route is None:
        return Routed(Decision.skip("unsupported", f"{msg.meta.type}/{msg.meta.styp} is not handled"), {})
    wanted = route.flids(msg) if route.flids is not None and preloaded else None
    if preloaded and wanted is not None and all(f in preloaded for f in wanted):
        ctx: Any = FlightsContext({f: st for f in wanted if (st := preloaded[f]) is not None})
    else:
        before_read(None)
        ctx = route.load(conn, msg, msg_id)
    decision, flights = refresh_derived(conn, route.decide(msg, ctx), route.flights(ctx), msg_id, before_read)
    return Routed(decision, flights)
