"""A snapshot FLTR as its whole state, read by the one rule table every message line uses (FS §3.3
D1 whole states, D7 clears, D25 sequences and caps, US-03 AC2 nothing dropped silently).

``whole_record_fields`` is ``snapshot_fields(block_values(record))``: the rules a FLOP block is
read by, so a record's fields or its refusal are the same whatever line carries them. Checked on
every FLTR of the repository's SIS samples and golden cases, on the benchmark's generated records,
and on records Hypothesis assembles from valid and invalid pieces; the plain fields the offload
helper sends (``frozen=False``) freeze back into the same fields.
"""

from __future__ import annotations

import marshal
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree
from snapshot_builders import big_package, fltr

from msgx_engine.handlers.extract import Unmapped, block_values
from msgx_engine.handlers.snapshot import snapshot_fields
from msgx_engine.handlers.whole_record import whole_record_fields
from msgx_engine.pipeline.large_bodies.package_split import freeze
from msgx_engine.sis.decode import parse_xml

TESTS = Path(__file__).resolve().parent.parent


def fields_or_refusal(record: etree._Element, *, frozen: bool = True) -> object:
    try:
        return list(whole_record_fields(record, frozen=frozen).items())
    except Unmapped as exc:
        return f"Unmapped: {exc}"


def check(record: etree._Element) -> bool:
    """Frozen and plain fields agree (keys, order, value types); the plain ones cross ``marshal``
    and freeze back into the frozen ones. True when the record is accepted."""
    frozen = fields_or_refusal(record)
    plain = fields_or_refusal(record, frozen=False)
    if isinstance(frozen, str):
        assert plain == frozen, etree.tostring(record)
        return False
    assert frozen == list(snapshot_fields(block_values(record)).items())
    assert isinstance(plain, list)
    sent = marshal.loads(marshal.dumps(dict(plain)))
    assert sent == dict(plain)
    again = freeze(sent)
    assert list(again.items()) == frozen
    assert [type(v) for v in again.values()] == [type(v) for _, v in frozen]
    assert "MAFL" not in dict(frozen), "derived, never taken from the package (D30)"
    return True


def records_in(path: Path) -> list[etree._Element]:
    try:
        root = parse_xml(path.read_bytes())
    except Exception:      # bad-input files are refused before any record is read
        return []
    return list(root.iter("FLTR"))


def test_samples_and_golden_records_are_read() -> None:
    """Every FLTR shipped with the repository: frozen and plain fields agree, refusals included
    (some golden cases are refusals); most are accepted."""
    files = [*sorted((TESTS / "data" / "sis-samples").rglob("*.xml")), *sorted((TESTS / "golden").rglob("*.xml"))]
    records = [r for f in files for r in records_in(f)]
    assert len(records) > 20
    accepted = [check(r) for r in records]
    assert sum(accepted) >= 20, "valid sample records refused"


def test_benchmark_records_are_all_accepted() -> None:
    """The 10,000-flight benchmark's shape (bench/bench_snapshot.py) is plainly valid."""
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
    elements, comments, namespaces): frozen and plain agree, refusals included."""
    xml = fltr("F000001", extra="".join(parts))
    check(etree.fromstring(xml))


def test_refusals_name_what_the_catalogue_refuses() -> None:
    """Each structurally invalid piece alone refuses the record, naming it."""
    named = {
        "<XXXX>1</XXXX>": "FLTR/XXXX is not in the catalogue",
        "<REMC><B/></REMC>": "REMC has attributes or elements",
        '<REMC x="1">YG</REMC>': "REMC has attributes or elements",
        '<GTDT GTNO="x"/>': "GTDT@GTNO='x' is not an integer 0..999",
        '<GTDT GTNO="1000"><GATE>1</GATE></GTDT>': "GTDT@GTNO='1000' is not an integer",
        '<GTDT GTNO="1"><XXXX/></GTDT>': "GTDT/XXXX is not in the catalogue",
        '<GTDT GTNO="1" ZZ="1"/>': "GTDT@ZZ is not in the catalogue",
        '<GTDT GTNO="1"><GATE><B/></GATE></GTDT>': "GTDT/GATE has unexpected nested elements",
        '<GTDT GTNO="1">text</GTDT>': "GTDT carries text where the catalogue expects elements",
        '<FDIV DDIR="UP">x</FDIV>': "FDIV@DDIR='UP' is not one of TO/FROM",
        "<FDIV><X/></FDIV>": "FDIV/X is not in the catalogue",
        '<GTDT GTNO="0"><GATE>A1</GATE></GTDT>': "GTNO=0 is the clear marker but carries GATE",
    }
    for piece, words in named.items():
        refused = fields_or_refusal(etree.fromstring(fltr("F000001", extra=piece)))
        assert isinstance(refused, str) and words in refused, (piece, refused)
    caps = etree.fromstring(fltr("F000001", extra="".join(f'<GTDT GTNO="{n}"/>' for n in range(1, 66))))
    assert "65 entries exceed the limit of 64" in str(fields_or_refusal(caps))
    repeated = etree.fromstring(fltr("F000001", extra='<GTDT GTNO="1"><GATE>A</GATE></GTDT><GTDT GTNO="1"/>'))
    assert "GTNO 1 appears more than once" in str(fields_or_refusal(repeated))


def test_what_is_no_part_of_the_catalogue_is_left_out_not_refused() -> None:
    """Comments, and attributes in a namespace of their own, are no field: they are left out, as
    a FLOP block leaves them out; an empty element clears whatever names it uses (D7)."""
    read = whole_record_fields(etree.fromstring(fltr("F000001", extra=(
        '<REMC>Y<!-- c -->G</REMC><FRET xmlns:x="urn:x" x:q="1" REID="A"/>'
        '<GTDT GTNO="1"><!-- c --><GATE>1</GATE></GTDT><FDIV XX=""/>'))))
    assert read["REMC"] == "Y" and read["FRET"] == {"REID": "A"}
    assert read["GTDT"] == ({"GATE": "1", "GTNO": "1"},) and "FDIV" not in read


def test_every_record_names_its_keys_with_the_catalogues_own_strings() -> None:
    """The keys of two records' fields, and of their entries, are one object per name
    (not lxml's copy of each tag), so the helper's part repeats one string per name and
    ``marshal`` writes each once: the part is smaller, and the pump reads it back faster."""
    root = parse_xml(big_package(2))
    first, second = (whole_record_fields(r, frozen=False) for r in root.iter("FLTR"))
    for key in first.keys() & second.keys():
        assert next(k for k in first if k == key) is next(k for k in second if k == key), key
    gates = first["GTDT"], second["GTDT"]
    assert all(a is b for a, b in zip(sorted(gates[0][0]), sorted(gates[1][0]), strict=True)), "entry keys too"
