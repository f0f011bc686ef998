"""Seasonal schedules (SCHS DNLD/RESP): parse and check a season package, purely.

A season is identified by (SNAM, SDAT, EDAT) and replaced as a whole by every accepted package;
its flights are planning records (days-of-operation masks, HHMM times), not flight instances, so
they live in their own tables and never touch ``flight_schd``. Times stay raw (D19, SIS time strings).

Strict like every handler: an element the seasonal record does not know makes the message
DEAD(malformed) naming it, and nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass

from lxml import etree

from msgx_engine.handlers.decision import Decision, Plan
from msgx_engine.handlers.extract import Unmapped, entry_of, text_of
from msgx_engine.handlers.snapshot import MAX_FLIGHTS
from msgx_engine.sis.decode import SisMessage
from msgx_engine.sis.times import sis_date

# The seasonal FLTR as the samples and the catalogue show it (sis-catalogue.md, SCHS).
SEASON_FLIGHT_SCALARS: tuple[str, ...] = (
    "ALCD", "FLNO", "MVIN", "STDT", "EDDT", "DYOP", "SCHT", "FLTY", "FLIN", "ACFT", "RENO",
    "TAOP", "TAFL", "TRML", "MAXP", "CSOP", "CSFT",
)
SEASON_ROUTE_KINDS: tuple[str, ...] = ("ROUT", "ERUT")
SEASON_ROUTE_PARTS: tuple[str, ...] = ("APCD", "SCAT", "SCDT", "SADC", "SDDC")
_HEADER = ("SNAM", "APCD", "SDAT", "EDAT", "RECS")


@dataclass(frozen=True)
class SeasonFlight:
    scalars: dict[str, str]                                  # element -> raw value (absent: empty)
    routes: tuple[tuple[str, dict[str, str]], ...]           # (ROUT|ERUT, entry) in input order


@dataclass(frozen=True)
class Season:
    snam: str
    sdat: str
    edat: str
    apcd: str | None
    styp: str
    flights: tuple[SeasonFlight, ...]

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.snam, self.sdat, self.edat)


@dataclass(frozen=True)
class SeasonPlan(Plan):
    """Replace the season whole (``store.seasons.write_season``)."""

    season: Season


@dataclass(frozen=True)
class SeasonContext:
    """What the route loads: the mailbox id and the message that last replaced this season
    (None when the season is new or its key is unreadable; ``read_season`` then decides)."""

    msg_id: int
    last_message_id: int | None = None


def season_key(msg: SisMessage) -> tuple[str, str, str] | None:
    """(SNAM, SDAT, EDAT) as the package names them, for the loader; None when absent."""
    container = msg.root.find("SCHS")
    if container is None:
        return None
    key = tuple(text_of(container.find(name)) for name in ("SNAM", "SDAT", "EDAT"))
    return (key[0], key[1], key[2]) if all(key) else None


def _flight(record: etree._Element, index: int) -> SeasonFlight:
    scalars: dict[str, str] = {}
    routes: list[tuple[str, dict[str, str]]] = []
    for child in record:
        if not isinstance(child.tag, str):
            continue
        if child.tag in SEASON_ROUTE_KINDS:
            routes.append((child.tag, entry_of(child, seq_attr="RTNO", children=SEASON_ROUTE_PARTS)))
        elif child.tag in SEASON_FLIGHT_SCALARS:
            if child.tag in scalars or len(child) or child.attrib:
                raise Unmapped(f"SCHS FLTR #{index}: {child.tag} is repeated or not a plain value")
            value = text_of(child)
            if value:
                scalars[child.tag] = value
        else:
            raise Unmapped(f"SCHS FLTR #{index}: {child.tag} is not part of a seasonal record")
    return SeasonFlight(scalars, tuple(routes))


def read_season(msg: SisMessage) -> Season:
    """The season package, checked whole (RECS, size, key); raises Unmapped or OversizeSeason."""
    container = msg.root.find("SCHS")
    assert container is not None  # decode() guarantees the container
    records = container.findall("FLTR")
    if len(records) > MAX_FLIGHTS:
        raise OversizeSeason(f"{len(records)} seasonal flights exceed the limit of {MAX_FLIGHTS}")
    for child in container:
        if isinstance(child.tag, str) and child.tag not in _HEADER and child.tag != "FLTR":
            raise Unmapped(f"SCHS/{child.tag} is not part of a seasonal schedule")
    head = {name: text_of(container.find(name)) for name in _HEADER}
    for name in ("SNAM", "SDAT", "EDAT"):
        if not head[name]:
            raise Unmapped(f"SCHS/{name} is missing: the season key is (SNAM, SDAT, EDAT)")
    for name in ("SDAT", "EDAT"):
        if sis_date(head[name]) is None or len(head[name]) != 7:
            raise Unmapped(f"SCHS/{name}={head[name]!r} is not a DDMONYY date")
    if not head["RECS"].isdigit() or int(head["RECS"]) != len(records):
        raise Unmapped(f"SCHS/RECS={head['RECS']!r} but {len(records)} FLTR present")
    flights = tuple(_flight(r, i) for i, r in enumerate(records, start=1))
    return Season(head["SNAM"], head["SDAT"], head["EDAT"], head["APCD"] or None, msg.meta.styp, flights)


class OversizeSeason(ValueError):
    """More seasonal flights than one package may carry."""


def decide(msg: SisMessage, ctx: SeasonContext) -> Decision:
    """SCHS DNLD and RESP alike: the season is replaced whole. A RESP needs no open request
    because msgx never asks for seasons; the data is planning only and cannot regress live
    flight state (docs/snapshots.md). A message that already is the season's last one plans
    nothing (replay short-circuit, like the daily ledger)."""
    try:
        season = read_season(msg)
    except OversizeSeason as exc:
        return Decision.dead("oversize", str(exc))
    except Unmapped as exc:
        return Decision.dead("malformed", str(exc))
    if ctx.last_message_id == ctx.msg_id:
        return Decision.apply()
    return Decision.apply(plans=(SeasonPlan(season),))
