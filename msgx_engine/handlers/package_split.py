"""A large package's records extracted on two cores (issue 16, decision P27).

Turning a 10,000-flight package's FLTR records into whole states is the largest single cost of a
snapshot, and it is the same pure function of each record. The helper process that already
parses every large body for its canonical hash (``pipeline.offload``) extracts the later records,
``records[later_start(n):]``, while the pump decodes, reads the day's state and extracts the
earlier ones; the pump then takes the helper's part instead of extracting it again.

What crosses the pipe is plain data (``thaw``: the frozen views become dicts, which ``marshal``
writes) and it is frozen again on arrival (``freeze``). The helper runs the very function the
pump runs, on a tree its own hardened parser built from the same bytes, so the fields are the
ones the pump would have built (``handlers.snapshot.helper_part`` is the helper's side). The
pump still checks what it takes (``taken``): the part must start where it expects, hold every
later record, and name the same FLIDs in the same order as the pump's own outline; anything
else, and any record the helper could not extract (its part then carries nothing), is extracted
by the pump, which gives the verdict and its wording exactly as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from msgx_engine.state.model import Value

Fields = Mapping[str, Value]
Flights = tuple[tuple[str, Fields], ...]

# The share of a package's records the helper extracts, taken from the end. The pump reaches its
# own extraction only after decoding, checking and reading the day's state (about 40% of the
# time to extract the whole package), while the helper starts as the body arrives but must also
# write its part out. At 0.6 (P27) the pump then waited 0.27-0.30 s for the helper's answer on a
# 10,000-flight package; at 0.5 it waits 0.04-0.07 s and its decision is done 0.12 s sooner
# (docs/benchmarks.md, session 28), so both are done at about the same moment. Since the helper
# makes the whole tree's checks after its part (P32), the pump reaches its extraction 0.09 s
# sooner, and 0.45 balances them again (0.4: slower; session 34).
HELPER_SHARE = 0.45
MIN_RECORDS = 200         # a smaller package costs less to extract than to hand over


def later_start(n: int) -> int:
    """The index of the first record the helper extracts from a package of ``n`` (``n``: none)."""
    if n < MIN_RECORDS:
        return n
    return n - round(n * HELPER_SHARE)


def thaw(fields: Fields) -> dict[str, object]:
    """Whole-state fields as plain data ``marshal`` writes: dicts for the frozen views."""
    plain: dict[str, object] = {}
    for key, value in fields.items():
        if isinstance(value, str):
            plain[key] = value
        elif isinstance(value, tuple):
            plain[key] = tuple(dict(entry) for entry in value)
        else:
            plain[key] = dict(value)
    return plain


def freeze(plain: dict[str, object]) -> Fields:
    """``thaw``'s output frozen again in place: the same keys, in the same (sorted) order."""
    for key, value in plain.items():
        kind = type(value)
        if kind is tuple:
            plain[key] = tuple(map(MappingProxyType, value))       # type: ignore[call-overload]
        elif kind is dict:
            plain[key] = MappingProxyType(value)                   # type: ignore[arg-type]
    return MappingProxyType(plain)     # type: ignore[arg-type]


def taken(part: object, start: int, flids: Sequence[str]) -> Flights | None:
    """The pump's side: the helper's ``part`` frozen, when it is the part the pump expects (the
    records from ``start``, with ``flids[start:]`` in order); None: extract them here."""
    if not isinstance(part, tuple) or len(part) != 2 or part[0] != start:
        return None
    flights = part[1]
    if not isinstance(flights, list) or len(flights) != len(flids) - start:
        return None
    if any(flid != expected for (flid, _), expected in zip(flights, flids[start:], strict=True)):
        return None
    return tuple((flid, freeze(plain)) for flid, plain in flights)
