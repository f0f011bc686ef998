"""The flight field catalogue: which SIS element lands in which column, table or JSON group.

Built from ``sis-catalogue.json`` (the samples plus the peer's entity) and FS §6.1. It is plain
data so that the schema (``store.tables``), the merge engine (``state``) and the handlers all
agree on one list; adding an element here adds its column in a new migration and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

# D25, sequence attributes and sizes, FS §6: a sequence attribute is an integer 0..999, and a repeated group holds at
# most this many entries in one message (a route at most ROUTE_CAP points): more is a malformed message.
SEQUENCE_MAX = 999
GROUP_CAP = 64
ROUTE_CAP = 16

# Flight scalars: one column each on ``flight_schd`` (lower-case element name).
SCALARS: tuple[str, ...] = (
    "FFID", "ALCD", "FLNO", "MVIN", "SODT", "FLTY", "FLIN", "ACFT", "RENO", "ALSC",
    "TAOP", "TAFL", "TAID", "TRML", "MAXP", "STND", "PHAG", "FHAG", "MHAG",
    "EXSC", "EXSR", "FTSS", "CSOP", "CSFT", "MAID", "ESTT", "ACTT", "CNCL", "REMC",
    "BOTM", "LACL", "FINT", "APPT", "EGSR", "EGST", "VIPP", "VIPR", "LBNO", "LBWT",
    "PAXC", "PEDT", "NEAT", "PADT", "NAAT", "COBT", "TOBT", "EOBT", "IEST", "RUNW", "CTOT",
)


@dataclass(frozen=True)
class CollectionSpec:
    """A repeated group stored as rows of a detail table (FS §6.1)."""

    key: str                      # element name in the message and key in the state JSON
    table: str                    # detail table
    seq_attr: str | None          # sequence attribute (GTNO ...), None where the protocol has none
    children: tuple[str, ...]     # child elements, one column each
    attrs: tuple[str, ...] = ()   # further attributes, one column each (DELY@CODE ...)
    text: bool = False            # the element's own text is a value (DELY)
    route_kind: str | None = None  # ROUT/ERUT share flight_route_point
    max_entries: int = GROUP_CAP   # entries one message may carry (D25)

    @cached_property
    def columns(self) -> tuple[str, ...]:
        cols = tuple(c.lower() for c in self.children) + tuple(a.lower() for a in self.attrs)
        return cols + (("text",) if self.text else ())


COLLECTIONS: tuple[CollectionSpec, ...] = (
    CollectionSpec("GTDT", "flight_gate", "GTNO", ("GATE", "PGOT", "PGCT", "GOTM", "GCTM", "GTYP")),
    CollectionSpec("CKDT", "flight_checkin", "CKNO", ("CHKC", "CCLS", "PCOT", "PCCT", "COTM", "CCTM", "CTYP")),
    CollectionSpec("CLDT", "flight_belt", "CLNO", ("BELT", "BCLS", "PCOT", "PCCT", "BTYP", "FBAG", "LBAG")),
    CollectionSpec("PSDT", "flight_stand_plan", "PSNO", ("PSST", "STST", "STET")),
    CollectionSpec("CHDT", "flight_chute", "CHNO", ("CHUT", "CCLS", "PCBT", "PCET", "CBTM", "CETM", "CTYP")),
    CollectionSpec("DELY", "flight_delay", None, (), attrs=("CODE", "STRT", "DURA"), text=True),
    CollectionSpec("ABTM", "flight_bridge_op", "ASNO", ("ABDG", "ABOP", "AOTM")),
    CollectionSpec("CHOT", "flight_chock_op", "CSNO", ("CHTM", "CHID", "CHST")),
    CollectionSpec("ROUT", "flight_route_point", "RTNO", ("APCD", "SCAT", "SCDT", "SADC", "SDDC"),
                   route_kind="ROUT", max_entries=ROUTE_CAP),
    CollectionSpec("ERUT", "flight_route_point", "RTNO", ("APCD", "SCAT", "SCDT", "SADC", "SDDC"),
                   route_kind="ERUT", max_entries=ROUTE_CAP),
)
COLLECTION_BY_KEY: dict[str, CollectionSpec] = {c.key: c for c in COLLECTIONS}
DETAIL_TABLES: tuple[str, ...] = tuple(dict.fromkeys(c.table for c in COLLECTIONS))


@dataclass(frozen=True)
class ObjectSpec:
    """A single structured value stored as prefixed columns and replaced as a whole (FS §6.2)."""

    key: str
    attrs: tuple[str, ...] = ()
    children: tuple[str, ...] = ()
    text: bool = False
    enums: tuple[tuple[str, tuple[str, ...]], ...] = ()   # attribute -> allowed non-empty values

    # parts and columns are computed once per spec: the read path asks for them for every row it
    # turns back into fields (re-computed, they were 4% of the pump's time)
    @cached_property
    def parts(self) -> tuple[str, ...]:
        return self.attrs + self.children + (("TEXT",) if self.text else ())

    @cached_property
    def columns(self) -> tuple[str, ...]:
        return tuple(f"{self.key.lower()}_{p.lower()}" for p in self.parts)


OBJECTS: tuple[ObjectSpec, ...] = (
    ObjectSpec("FDIV", attrs=("DDES", "DDIR"), text=True, enums=(("DDIR", ("TO", "FROM")),)),
    ObjectSpec("FRET", attrs=("REID",), text=True, enums=(("REID", ("A", "G")),)),
    ObjectSpec("FLAB", attrs=("ARES",), text=True, enums=(("ARES", ("O", "G")),)),
)
OBJECT_BY_KEY: dict[str, ObjectSpec] = {o.key: o for o in OBJECTS}


@dataclass(frozen=True)
class TextGroupSpec:
    """A repeated group without a detail table: kept as a JSON array in ``<key>_text``."""

    key: str
    seq_attr: str | None
    children: tuple[str, ...]
    max_entries: int = GROUP_CAP   # entries one message may carry (D25)

    @cached_property
    def column(self) -> str:
        return f"{self.key.lower()}_text"


TEXT_GROUPS: tuple[TextGroupSpec, ...] = (
    TextGroupSpec("SRVT", None, ("SRTC", "SRQT", "SRST", "SRET", "SRPR", "SANR", "SARR")),
    TextGroupSpec("VIPF", None, ("VPCD", "VFES", "VIPT")),
    TextGroupSpec("PSHT", "PSHN", ("PSTM", "PSID", "PUST")),
    TextGroupSpec("TIPT", None, ("TRTM", "TRST")),
    TextGroupSpec("MAFL", None, ("FLID", "ALCD", "FLNO")),
    # Port open (POID=O) and close (POID=C) times side by side: a PORT message replaces only the
    # entry with its own POID (the peer keeps both, as port_open_time / port_close_time).
    TextGroupSpec("PORT", None, ("POTM", "POID")),
)
PORT_IDS: tuple[str, ...] = ("O", "C")
TEXT_GROUP_BY_KEY: dict[str, TextGroupSpec] = {t.key: t for t in TEXT_GROUPS}

# FLOP subtypes whose STYP names a payload made of several scalar elements.
GROUPED_SCALAR_SUBTYPES: dict[str, tuple[str, ...]] = {
    "EXSS": ("EXSC", "EXSR"),
    "HNAG": ("FHAG", "PHAG", "MHAG"),
    "TAOP": ("TAOP", "TAFL", "TAID"),
    "VIPP": ("VIPP", "VIPR"),
}


def scalar_column(name: str) -> str:
    return name.lower()


def flight_columns() -> tuple[str, ...]:
    """Every business column of ``flight_schd`` in a stable order."""
    cols = [scalar_column(s) for s in SCALARS]
    for obj in OBJECTS:
        cols.extend(obj.columns)
    cols.extend(t.column for t in TEXT_GROUPS)
    return tuple(cols)
