"""The one-pass FLTR extraction equals the exact one (FS §3.3 D1 whole states, D7 clears, D25
sequences and caps, US-03 AC2 nothing dropped silently; issue 16).

``whole_record_fields`` may only ever answer what ``snapshot_fields(block_values(record))``
answers, key order included; where it declines (None) the exact path decides, refusals included.
Checked on every FLTR of the repository's SIS samples and golden cases, on the benchmark's
generated records (where it must decide, or the fast path would never run), and on records
Hypothesis assembles from valid and invalid pieces.
"""

from __future__ import annotations

import marshal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree
from snapshot_builders import big_package, fltr

from msgx_engine.handlers import package_split, whole_record
from msgx_engine.handlers.extract import Unmapped, block_values
from msgx_engine.handlers.snapshot import snapshot_fields
from msgx_engine.handlers.whole_record import compiled, python_fields, records_fields, whole_record_fields
from msgx_engine.sis.decode import parse_xml

TESTS = Path(__file__).resolve().parent.parent


def exact(record: etree._Element) -> object:
    try:
        return list(snapshot_fields(block_values(record)).items())
    except Unmapped as exc:
        return f"Unmapped: {exc}"


def same_as_python(record: etree._Element) -> bool:
    """The compiled pass (P35), when it answers, answers as the Python pass does, frozen or plain,
    key order and value types included; True when it answered."""
    assert compiled is not None
    frozen, plain = compiled.fields_many([record], True)[0], compiled.fields_many([record], False)[0]
    assert (frozen is None) == (plain is None)
    if frozen is None:
        return False
    for walked, python in ((frozen, python_fields(record)), (plain, python_fields(record, frozen=False))):
        assert python is not None, etree.tostring(record)
        assert type(walked) is type(python) and list(walked.items()) == list(python.items()), etree.tostring(record)
        for value, expected in zip(walked.values(), python.values(), strict=True):
            assert type(value) is type(expected)
            if isinstance(value, tuple):
                assert [type(e) for e in value] == [type(e) for e in expected]
    return True


def check(record: etree._Element) -> bool:
    """The fast path's answer, when it gives one, is the exact one; True when it gave one."""
    same_as_python(record)
    fast = whole_record_fields(record)
    if fast is None:
        return False
    assert list(fast.items()) == exact(record), etree.tostring(record)
    assert all(type(v) is type(w) for v, w in zip(fast.values(), dict(exact(record)).values(), strict=True))
    plain = whole_record_fields(record, frozen=False)    # what the helper process sends (P27)
    assert plain is not None and marshal.loads(marshal.dumps(plain)) == plain
    assert list(package_split.freeze(dict(plain)).items()) == list(fast.items())
    return True


def records_in(path: Path) -> list[etree._Element]:
    try:
        root = parse_xml(path.read_bytes())
    except Exception:      # bad-input files are refused before any record is read
        return []
    return list(root.iter("FLTR"))


def test_samples_and_golden_records_agree_and_take_the_fast_path() -> None:
    """Every FLTR shipped with the repository: the same fields; the valid ones decided in one pass."""
    files = [*sorted((TESTS / "data" / "sis-samples").rglob("*.xml")), *sorted((TESTS / "golden").rglob("*.xml"))]
    records = [r for f in files for r in records_in(f)]
    assert len(records) > 20
    decided = [check(r) for r in records]
    refused = [r for r in records if isinstance(exact(r), str)]
    assert sum(decided) >= len(records) - len(refused) - 5, "the fast path declines valid sample records"


def test_benchmark_records_are_decided_in_one_pass() -> None:
    """The 10,000-flight benchmark's shape (bench/bench_snapshot.py) never needs the exact path."""
    root = parse_xml(big_package(50))
    assert all(check(r) for r in root.iter("FLTR"))


# --- generated records ---------------------------------------------------------------------------
VALID = [
    "<ALCD>YG</ALCD>", "<FLNO> YG1 </FLNO>", "<STND></STND>", "<STND>  </STND>", "<REMC>late</REMC>",
    '<GTDT GTNO="1"><GATE>G1</GATE><PGOT></PGOT></GTDT>', '<GTDT GTNO="2"><GATE>G2</GATE></GTDT>',
    '<GTDT GTNO="0"/>', '<GTDT GTNO=""/>', "<GTDT/>", '<GTDT GTNO="007"><GTYP>D</GTYP></GTDT>',
    '<CKDT CKNO="1"><CHKC>C1</CHKC></CKDT>', '<ROUT RTNO="1"><APCD>XIY</APCD></ROUT>',
    '<DELY CODE="11" DURA="5">late crew</DELY>', '<DELY CODE=" "/>', "<DELY/>", "<DELY>  x </DELY>",
    '<FDIV DDES="PEK" DDIR="TO">weather</FDIV>', '<FDIV DDIR="">x</FDIV>', "<FDIV/>", '<FRET REID="A"/>',
    '<FLAB ARES="O">x</FLAB>', '<PSHT PSHN="1"><PSTM>0900</PSTM></PSHT>', "<SRVT><SRTC>W</SRTC></SRVT>",
    "<SRVT/>", "<MAFL><FLID>1</FLID><ALCD>CA</ALCD></MAFL>", "<VIPF><VPCD>V</VPCD></VIPF>",
    '<PSDT PSNO="1"><PSST>501</PSST></PSDT>', "<GTDT><GATE></GATE><GATE>X</GATE></GTDT>",
    "<DELY><![CDATA[ a&b ]]></DELY>", "<FLID>again</FLID>", '<GTDT GTNO=" 3 "><GATE> G3 </GATE><GTYP>\n</GTYP></GTDT>',
    '<CKDT CKNO="4"> <CHKC>C4</CHKC> </CKDT>', '<FRET REID=" G ">  back </FRET>',
]
INVALID = [
    "<XXXX>1</XXXX>", "<ALCD><B/></ALCD>", '<ALCD x="1">YG</ALCD>', '<GTDT GTNO="x"/>',
    '<GTDT GTNO="1000"><GATE>1</GATE></GTDT>', '<GTDT GTNO="1"><XXXX/></GTDT>', '<GTDT GTNO="1" ZZ="1"/>',
    '<GTDT GTNO="1"><GATE><B/></GATE></GTDT>', '<GTDT GTNO="1">text</GTDT>', '<FDIV DDIR="UP">x</FDIV>',
    '<FDIV><X/></FDIV>', "<!-- note -->", "<?pi x?>", '<GTDT GTNO="1"><!-- c --><GATE>1</GATE></GTDT>',
    '<ALCD xmlns:n="urn:x" n:a="1">YG</ALCD>', '<GTDT xmlns:n="urn:x" n:a="1" GTNO="3"/>',
    "<ALCD>Y<!-- c -->G</ALCD>",
]
pieces = st.lists(st.sampled_from(VALID + INVALID), max_size=12)


@settings(max_examples=400, deadline=None)
@given(pieces)
def test_generated_records_agree(parts: list[str]) -> None:
    """Any mix of valid and invalid pieces (repeats, zero and duplicate sequences, clears, unknown
    elements, comments, namespaces): the fast path answers as the exact one or declines."""
    xml = fltr("F000001", extra="".join(parts))
    check(etree.fromstring(xml))


def test_refusals_are_left_to_the_exact_path() -> None:
    """Each invalid piece alone makes the fast path decline, and the exact path names it."""
    for piece in INVALID[:11]:
        record = etree.fromstring(fltr("F000001", extra=piece))
        assert whole_record_fields(record) is None, piece
        assert isinstance(exact(record), str), piece
    caps = etree.fromstring(fltr("F000001", extra="".join(f'<GTDT GTNO="{n}"/>' for n in range(1, 66))))
    assert whole_record_fields(caps) is None and "exceed the limit" in str(exact(caps))
    repeated = etree.fromstring(fltr("F000001", extra='<GTDT GTNO="1"><GATE>A</GATE></GTDT><GTDT GTNO="1"/>'))
    assert whole_record_fields(repeated) is None and "more than once" in str(exact(repeated))


def test_every_record_names_its_keys_with_the_catalogues_own_strings() -> None:
    """Issue 16: the keys of two records' fields, and of their entries, are one object per name
    (not lxml's copy of each tag), so the helper's part repeats one string per name and
    ``marshal`` writes each once: the part is smaller, and the pump reads it back faster."""
    root = parse_xml(big_package(2))
    first, second = (whole_record_fields(r, frozen=False) for r in root.iter("FLTR"))
    assert first is not None and second is not None
    for key in first.keys() & second.keys():
        assert next(k for k in first if k == key) is next(k for k in second if k == key), key
    gates = first["GTDT"], second["GTDT"]
    assert all(a is b for a, b in zip(sorted(gates[0][0]), sorted(gates[1][0]), strict=True)), "entry keys too"


# --- the compiled pass (P35) ---------------------------------------------------------------------
def test_the_compiled_pass_is_built() -> None:
    """``pip install`` builds ``_record_walk.c`` wherever the tests run (scripts/test.sh): the
    snapshot's speed (issue 16) rests on it, and a build that failed quietly would only be slow."""
    assert compiled is not None


def test_the_compiled_pass_decides_the_benchmark_records() -> None:
    """The benchmark's records and the samples' valid ones are decided in C, not handed back."""
    records = list(parse_xml(big_package(50)).iter("FLTR"))
    assert all(same_as_python(r) for r in records)
    assert records_fields(records, frozen=False) == [python_fields(r, frozen=False) for r in records]


def test_the_compiled_pass_hands_back_what_python_must_decide() -> None:
    """Whatever the Python pass declines, the compiled one declines too (it answers None, and the
    caller runs the Python pass); some things the Python pass reads it leaves to Python too:
    text in several nodes (a CDATA section beside text), Unicode whitespace at an edge."""
    assert compiled is not None
    for piece in INVALID:
        record = etree.fromstring(fltr("F000001", extra=piece))
        if python_fields(record) is None:
            assert compiled.fields_many([record], True) == [None], piece
    split = etree.fromstring(fltr("F000001", extra="<DELY>a <![CDATA[b]]></DELY>"), etree.XMLParser(strip_cdata=False))
    assert compiled.fields_many([split], True) == [None]
    assert whole_record_fields(split) == python_fields(split) is not None
    spaced = etree.fromstring(fltr("F000001", extra="<REMC>\u00a0late\u3000</REMC>"))
    assert same_as_python(spaced) and whole_record_fields(spaced)["REMC"] == "late"     # type: ignore[index]


def test_the_compiled_pass_refuses_what_is_no_element() -> None:
    """The C code reads lxml's element struct: anything else is refused before it is read."""
    assert compiled is not None
    try:
        compiled.fields_many(["<FLTR/>"], True)    # type: ignore[list-item]
    except TypeError:
        pass
    else:
        raise AssertionError("a string was read as an element")
    comment = etree.Comment("x")
    assert compiled.fields_many([comment], True) == [None]


def test_the_compiled_pass_checks_lxmls_layout_before_it_is_used() -> None:
    """``configure`` reads a known element through the struct the C code assumes and refuses an
    element that does not read as expected, leaving the rules it had (an lxml built otherwise
    would be caught there, and msgx would use the Python pass)."""
    assert compiled is not None
    rules = (whole_record._SCALARS, whole_record._KEYS, whole_record._GROUPS, whole_record._OBJECTS, "FLID",
             frozenset(), {}, lambda raw: None, etree._Element)
    for probe in ('<Q a="v">t</Q>', '<P a="w">t</P>', "<P>t</P>", '<P a="v"/>'):
        with pytest.raises(RuntimeError, match="not laid out"):
            compiled.configure(*rules, etree.fromstring(probe))
    record = parse_xml(big_package(1)).find("SCHD/FLTR")
    assert record is not None and same_as_python(record)
