"""Message builders for tests: real SIS shapes with fresh SEQNs so each is a distinct message."""

from __future__ import annotations

import itertools
from types import MappingProxyType

from msgx_engine.state.model import FlightState, freeze_entry

_seq = itertools.count(500000)


def state(flid: str, deleted: bool = False, **fields) -> FlightState:
    """A stored flight (version 2) holding ``fields``; list values become frozen entries."""
    frozen = {k: (tuple(freeze_entry(e) for e in v) if isinstance(v, list) else v) for k, v in fields.items()}
    return FlightState(flid=flid, fields=MappingProxyType(dict(sorted(frozen.items()))), state_version=2,
                       deleted=deleted)


def next_seqn() -> int:
    return next(_seq)


def envelope(mtype: str, styp: str, body: str, *, seqn: int | None = None, sndr: str = "AODB",
             dttm: str = "20210123053500") -> str:
    seqn = next_seqn() if seqn is None else seqn
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<MSG>\n\t<META>\n\t\t<SNDR>{sndr}</SNDR>\n'
            f"\t\t<SEQN>{seqn}</SEQN>\n\t\t<DTTM>{dttm}</DTTM>\n\t\t<TYPE>{mtype}</TYPE>\n"
            f"\t\t<STYP>{styp}</STYP>\n\t</META>\n{body}</MSG>\n")


def flop(styp: str, flid: str, payload: str, *, ffid: str = "CA-CA101-A-23JAN211345-D", **kw) -> str:
    return envelope("FLOP", styp, f"\t<FLOP>\n\t\t<FLID>{flid}</FLID>\n\t\t<FFID>{ffid}</FFID>\n"
                                  f"{payload}\t</FLOP>\n", **kw)


def gate(no: int | str, gate_code: str | None = None, gtyp: str = "D") -> str:
    if gate_code is None:
        return f'\t\t<GTDT GTNO="{no}"/>\n'
    return (f'\t\t<GTDT GTNO="{no}">\n\t\t\t<GATE>{gate_code}</GATE>\n\t\t\t<PGOT>23JAN210805</PGOT>\n'
            f"\t\t\t<GTYP>{gtyp}</GTYP>\n\t\t</GTDT>\n")


def gtdt(flid: str, *gates: tuple, **kw) -> str:
    """gtdt("F1", (1, "A1"), (2, "B2", "I")) -> a FLOP/GTDT message."""
    return flop("GTDT", flid, "".join(gate(*g) for g in gates), **kw)
