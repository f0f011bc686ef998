"""The second kind of content hash (sis/content_hash.py, P28, INV-9, US-03 AC3): the serializer's
spelling (``_fast``) is the walk's (``_walk``) whenever it answers, and the second kind tells
bodies apart exactly as the first kind does, so no duplicate becomes a conflict and no conflict a
duplicate when bindings move from one kind to the other."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree

from msgx_engine.sis import content_hash as ch
from msgx_engine.sis.decode import SisRefused, _parser, parse_xml

TESTS = Path(__file__).resolve().parent.parent


def walked(root: etree._Element) -> bytes:
    parts: list[str] = []
    ch._walk(root, ch._skipped(root), parts.append)
    return "".join(parts).encode()


def test_every_repository_document_spells_as_the_walk() -> None:
    """Samples, golden cases and bad inputs that parse: the serializer's spelling, when it
    answers, is the walk's; it answers for every real sample (which carry ``xmlns:xsi`` and
    ``xsi:noNamespaceSchemaLocation`` on MSG and two attributes on some elements) but one whose
    text has a space at its edge, so real bodies get the cheap path."""
    answered = 0
    for path in sorted(TESTS.rglob("*.xml")):
        try:
            root = parse_xml(path.read_bytes())
        except SisRefused:
            continue
        fast = ch._fast(root)
        if fast is not None:
            assert fast == walked(root), path
            answered += 1
        elif "sis-samples" in path.parts and path.name != "04_UPD.xml":   # GLST/04_UPD: " CA中文", a padded text
            raise AssertionError(f"{path}: a real sample took the walk")
    assert answered > 500


_TEXTS = st.sampled_from(["", "t", " t ", "a b", "\u3000x", "x\xa0", "&amp;&lt;&gt;", "'\"", "&#13;r", "\t\n",
                          "<![CDATA[ d ]]>", "<!-- c -->", "<?p i?>", "中文"])
_ATTRS = st.sampled_from(["", " x='1'", " x=' 1 '", " x='a b'", " b='2' a='1'", " a='1' b='2'", " q='&quot;&amp;'",
                          " t='&#9;'", " n:q='1'", " u='\u3000'", " e=''"])
_TAGS = st.sampled_from(["META", "DTTM", "A", "n:B", "GTDT"])


@st.composite
def _element(draw: st.DrawFn, depth: int = 0) -> str:
    tag = draw(_TAGS)
    inner = draw(_TEXTS)
    if depth < 3:
        for _ in range(draw(st.integers(0, 3))):
            inner += draw(_element(depth + 1)) + draw(st.sampled_from(["", "\n  ", " tail ", "\u3000"]))
    if not inner and draw(st.booleans()):
        return f"<{tag}{draw(_ATTRS)}/>"
    return f"<{tag}{draw(_ATTRS)}>{inner}</{tag}>"


_ROOTS = st.sampled_from(["<MSG xmlns:n='u'>{}</MSG>",
                          "<MSG xmlns:n='u' xmlns:xsi='http://www.w3.org/2001/XMLSchema-instance' "
                          "xsi:noNamespaceSchemaLocation='s.xsd'>{}</MSG>",
                          "<ROOT xmlns:n='u'>{}</ROOT>", "<MSG xmlns='d' xmlns:n='u'>{}</MSG>",
                          "<n:MSG xmlns:n='u'>{}</n:MSG>"])


def _tree(root: str, children: list[str], parser: etree.XMLParser | None = None) -> etree._Element:
    return etree.fromstring(root.format("\n".join(children)).encode(), parser or _parser())


@given(_ROOTS, st.lists(_element(), max_size=4), st.booleans())
@settings(max_examples=500, deadline=None)
def test_generated_documents_spell_as_the_walk(root: str, children: list[str], keeping: bool) -> None:
    """Namespaces on the root and below it, prefixed names, one and two attributes, whitespace
    (ASCII and Unicode) at the edges of texts and values, escaped characters, tails, blank
    leaves, self-closed elements, comments, PIs, CDATA, META/DTTM anywhere; and trees from a
    parser that keeps comments, PIs and CDATA sections, which decode's never does."""
    tree = _tree(root, children, etree.XMLParser(strip_cdata=False) if keeping else None)
    fast = ch._fast(tree)
    assert fast is None or fast == walked(tree)


@given(_ROOTS, st.lists(_element(), max_size=3), st.lists(_element(), max_size=3))
@settings(max_examples=400, deadline=None)
def test_the_kinds_tell_bodies_apart_alike(root: str, first: list[str], second: list[str]) -> None:
    """Two generated bodies have equal hashes of the second kind exactly when they have equal
    hashes of the first (INV-9: neither kind makes a duplicate of a conflict or the reverse)."""
    a, b = _tree(root, first), _tree(root, second)
    assert (ch.content_hash(a) == ch.content_hash(b)) == (ch.first_kind_hash(a) == ch.first_kind_hash(b))


VARIANTS = [
    # (one body, the same content written otherwise): formatting, attribute order, DTTM,
    # comments, blank tails, an empty element written both ways, a blank text
    ("<MSG><META><SNDR>A</SNDR><DTTM>1</DTTM></META><B x='1' y='2'>t</B><C/></MSG>",
     "<MSG>\n <META>\n  <SNDR> A </SNDR>\n  <DTTM>2</DTTM>\n </META>\n <B y='2' x=' 1'>\tt </B><!-- c -->\n"
     " <C> </C>\n</MSG>"),
    ("<MSG xmlns:xsi='http://www.w3.org/2001/XMLSchema-instance' xsi:a='1'><META><DTTM>1</DTTM></META>"
     "<G N='1'/><T M='' F=''/></MSG>",
     "<MSG><META/><G N='1'></G><T F=\"\" M=''></T></MSG>"),
]


def test_the_same_content_written_otherwise_hashes_alike() -> None:
    for one, other in VARIANTS:
        a, b = (etree.fromstring(x.encode(), _parser()) for x in (one, other))
        assert ch.first_kind_hash(a) == ch.first_kind_hash(b)
        assert ch.content_hash(a) == ch.content_hash(b)
        assert ch._fast(a) is not None, "the cheap path answers for the compact body"


def test_same_content_reads_either_kind() -> None:
    """A binding holds either kind, and so does a newer body: hashes of different kinds are
    compared by hashing the newer body in the stored one's kind."""
    root = etree.fromstring(b"<MSG><META><DTTM>1</DTTM></META><A>x</A></MSG>", _parser())
    other = etree.fromstring(b"<MSG><META><DTTM>1</DTTM></META><A>y</A></MSG>", _parser())
    newer = ch.content_hash(root)
    assert newer.startswith(ch.KIND) and len(newer) == len(ch.KIND) + 64
    assert ch.same_content(newer, newer, root)
    assert ch.same_content(ch.first_kind_hash(root), newer, root)
    assert not ch.same_content(ch.first_kind_hash(other), newer, root)
    assert not ch.same_content(ch.content_hash(other), newer, root)
    assert not ch.same_content(None, newer, root)
    small = ch.first_kind_hash(root)
    assert ch.same_content(newer, small, root) and ch.same_content(small, small, root)
    assert not ch.same_content(ch.content_hash(other), small, root)


def test_the_kind_follows_the_body_size() -> None:
    root = etree.fromstring(b"<MSG><A>x</A></MSG>", _parser())
    assert ch.body_hash(root, ch.SECOND_KIND_BYTES - 1) == ch.first_kind_hash(root)
    assert ch.body_hash(root, ch.SECOND_KIND_BYTES) == ch.content_hash(root)


_MARKER_BYTES = b'xmlns :&#="<!?> a'


@given(st.binary(max_size=40).map(lambda b: bytes(_MARKER_BYTES[c % len(_MARKER_BYTES)] for c in b)))
@settings(max_examples=2000, deadline=None)
def test_the_marker_tests_find_what_the_markers_find(spelled: bytes) -> None:
    """``_walk_only`` (a cheap test before each marker's search) sends a spelling to the
    walk exactly when one of ``_WALK_ONLY``'s markers is in it."""
    assert ch._walk_only(spelled) == any(marker in spelled for marker in ch._WALK_ONLY)


def test_every_marker_is_behind_a_test_it_contains() -> None:
    assert sorted(m for _, markers in ch._MARKER_TESTS for m in markers) == sorted(ch._WALK_ONLY)
    assert all(test in m for test, markers in ch._MARKER_TESTS for m in markers)
