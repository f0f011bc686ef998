"""D25, US-03 AC2, FS §6: the pure sequence rule, for every sequenced group of the catalogue."""

from __future__ import annotations

import pytest

from msgx_engine.handlers.extract import Unmapped, collection_entries
from msgx_engine.sis.decode import parse_xml
from msgx_engine.sis.fields import COLLECTIONS, ROUTE_CAP, TEXT_GROUPS

SEQUENCED = [g for g in (*COLLECTIONS, *TEXT_GROUPS) if g.seq_attr]


def _entries(spec, *seqs: str):
    child = spec.children[0]
    xml = "".join(f'<{spec.key} {spec.seq_attr}="{n}"><{child}>v{i}</{child}></{spec.key}>'
                  for i, n in enumerate(seqs))
    return collection_entries(list(parse_xml(f"<R>{xml}</R>")), spec)


def test_d25_every_sequence_attribute_of_the_catalogue_is_covered():
    """D25 names GTNO, PSNO, CKNO, CLNO, CHNO, ASNO, CSNO, RTNO, PSHN: each is checked."""
    assert {g.seq_attr for g in SEQUENCED} == {"GTNO", "PSNO", "CKNO", "CLNO", "CHNO", "ASNO", "CSNO",
                                                 "RTNO", "PSHN"}


@pytest.mark.parametrize("spec", SEQUENCED, ids=lambda s: s.key)
def test_d25_sequences_are_unique_integers_0_to_999(spec):
    """D25: 1, 2 and 999 are accepted in input order; a non-integer, a value above 999, a sign, a
    non-ASCII digit, a missing attribute and a repeated value (also "1" vs "001") are refused;
    all zeros still mean Clear (D7) as bare elements, and are refused when they carry a value (L10)."""
    assert [e[spec.seq_attr] for e in _entries(spec, "2", "1", "999")] == ["2", "1", "999"]
    bare = "".join(f'<{spec.key} {spec.seq_attr}="{n}"/>' for n in ("0", "00"))
    assert collection_entries(list(parse_xml(f"<R>{bare}</R>")), spec) is None
    with pytest.raises(Unmapped, match=f"{spec.seq_attr}=0 is the clear marker"):    # L10: a clear carrying a value
        _entries(spec, "0", "00")
    for bad in (("abc",), ("1000",), ("+1",), ("-1",), ("١",), ("1", "2", "2"), ("1", "001"), ("9" * 5000,)):
        with pytest.raises(Unmapped, match=spec.seq_attr):
            _entries(spec, *bad)
    child = spec.children[0]
    with pytest.raises(Unmapped, match="not an integer"):
        collection_entries(list(parse_xml(f"<R><{spec.key}><{child}>v</{child}></{spec.key}></R>")), spec)


@pytest.mark.parametrize("spec", [*COLLECTIONS, *TEXT_GROUPS], ids=lambda s: s.key)
def test_d25_group_caps(spec):
    """D25: ROUT/ERUT hold at most 16 entries, every other group at most 64; the cap is inclusive."""
    cap = ROUTE_CAP if spec.key in ("ROUT", "ERUT") else 64
    assert spec.max_entries == cap
    part = (spec.children or spec.attrs)[0]

    def group(n: int) -> list:
        seq = (lambda i: f' {spec.seq_attr}="{i}"') if spec.seq_attr else (lambda i: "")
        inner = (lambda i: f' {part}="v{i}"/>') if part in getattr(spec, "attrs", ()) else (
            lambda i: f"><{part}>v{i}</{part}></{spec.key}>")
        return list(parse_xml("<R>" + "".join(f"<{spec.key}{seq(i)}{inner(i)}" for i in range(1, n + 1))
                              + "</R>"))

    assert len(collection_entries(group(cap), spec)) == cap
    with pytest.raises(Unmapped, match="exceed the limit"):
        collection_entries(group(cap + 1), spec)
