"""A large package's records extracted on two cores (decision P27, offload helper extraction).

Turning a 10,000-flight package's FLTR records into whole states is the largest single cost of a
snapshot, and it is the same pure function of each record (``handlers.snapshot.records_flights``).
The offload worker that already parses every large body (``pipeline.large_bodies.offload``) extracts the later
records, ``records[later_start(n):]`` (``helper_part``), while the pump decodes, reads the day's
state and extracts the earlier ones; the pump then takes the worker's part instead of extracting
it again (``prepared_flights``, which the snapshot route hands its handler in its context). The
handler knows nothing of this: it gets the package's flights, or reads them itself.

What crosses the pipe is plain data (the fields built with ``frozen=False``, which ``marshal``
writes) and it is frozen again on arrival (``freeze``). The worker runs the very function the
pump runs, on a tree its own hardened parser built from the same bytes, so the fields are the
ones the pump would have built. The pump still checks what it takes (``taken``): the part must
start where it expects, hold every later record, and name the same FLIDs in the same order as the
pump's own outline; anything else, and any record the worker could not extract (its part then
carries nothing), is extracted by the pump. A package with a record the catalogue refuses is left
to the handler, which gives the verdict and its wording exactly as it does alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from lxml import etree

from msgx_engine.handlers.extract import Unmapped
from msgx_engine.handlers.snapshot import MAX_FLIGHTS, Flights, package_records, records_flights
from msgx_engine.pipeline.large_bodies.handover import HandedOver
from msgx_engine.sis.decode import SisMessage
from msgx_engine.state.model import Value

Fields = Mapping[str, Value]

# The share of a package's records the worker extracts, taken from the end. The pump reaches its
# own extraction only after decoding, checking and reading the day's state (about 40% of the
# time to extract the whole package), while the worker starts as the body arrives but must also
# write its part out. At 0.6 (P27) the pump then waited 0.27-0.30 s for the worker's answer on a
# 10,000-flight package; at 0.5 it waits 0.04-0.07 s and its decision is done 0.12 s sooner
# (docs/benchmarks.md, run 28), so both are done at about the same moment. Since the worker
# makes the whole tree's checks after its part (P32, tree checks in the helper), the pump reaches its extraction 0.09 s
# sooner, and 0.45 balances them again (0.4: slower; run 34).
HELPER_SHARE = 0.45
MIN_RECORDS = 200         # a smaller package costs less to extract than to hand over


def later_start(n: int) -> int:
    """The index of the first record the worker extracts from a package of ``n`` (``n``: none)."""
    if n < MIN_RECORDS:
        return n
    return n - round(n * HELPER_SHARE)


def helper_part(root: etree._Element) -> tuple[int, list[tuple[str, Fields]]] | None:
    """What the worker extracts of a body: the index of the first of a daily schedule's later
    records and the (FLID, plain fields) of each from there; None when the body is no package the
    pump would share (it then extracts whatever it needs itself). Raises what the extraction
    raises (the worker then sends nothing)."""
    container = root.find("SCHD") if root.tag == "MSG" else None
    if container is None:
        return None
    records = container.findall("FLTR")
    start = later_start(len(records))
    if len(records) > MAX_FLIGHTS or start == len(records):
        return None
    return start, records_flights(records[start:], frozen=False)


def prepared_flights(msg: SisMessage, flids: Sequence[str]) -> Flights | None:
    """The pump's side: a handed-over package's flights (the outline's ``flids``), the earlier
    records extracted here, then the worker's part taken, or extracted here when it has none to
    give. None when the body was not handed over or is too small to share, or when a record is
    refused: the handler then reads the package itself and names the refusal."""
    if not isinstance(msg, HandedOver):
        return None
    records = package_records(msg.root)
    start = later_start(len(records))
    if start == len(records):
        return None
    try:
        flights = records_flights(records[:start], flids[:start])
        later = taken(msg.pending.flights(), start, flids)
        return (*flights, *(later if later is not None else records_flights(records[start:], flids[start:])))
    except Unmapped:
        return None


def freeze(plain: dict[str, object]) -> Fields:
    """Plain fields (``frozen=False``, as ``marshal`` reads them back) frozen again in place: the
    same keys, in the same (sorted) order."""
    for key, value in plain.items():
        kind = type(value)
        if kind is tuple:
            plain[key] = tuple(map(MappingProxyType, value))       # type: ignore[call-overload]
        elif kind is dict:
            plain[key] = MappingProxyType(value)                   # type: ignore[arg-type]
    return MappingProxyType(plain)     # type: ignore[arg-type]


def taken(part: object, start: int, flids: Sequence[str]) -> Flights | None:
    """The worker's ``part`` frozen, when it is the part the pump expects (the records from
    ``start``, with ``flids[start:]`` in order); None: extract them here."""
    if not isinstance(part, tuple) or len(part) != 2 or part[0] != start:
        return None
    flights = part[1]
    if not isinstance(flights, list) or len(flights) != len(flids) - start:
        return None
    if any(flid != expected for (flid, _), expected in zip(flights, flids[start:], strict=True)):
        return None
    return tuple((flid, freeze(plain)) for flid, plain in flights)
