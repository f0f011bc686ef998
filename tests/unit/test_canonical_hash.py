"""The first kind of content hash (sis/content_hash.py, P17) is stored and compared across
versions (bindings made before P28 hold it): these values were computed by the implementation
before the walk was made cheaper, over the edge cases of its rule (META/DTTM only as
MSG/META/DTTM, namespaced attributes left out, sorted and stripped attributes, text before the
first child only, comments, PIs, tails, CDATA, Unicode whitespace). tests/unit/test_sis_corpus.py
pins the corpus's hashes the same way; tests/unit/test_content_hash.py holds the second kind."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree

from msgx_engine.sis import decode
from msgx_engine.sis.content_hash import first_kind_hash

PINNED = [
    ('<MSG><META><DTTM>x</DTTM><SNDR>A</SNDR></META><B/></MSG>',
     '9d2797bc4e09b0af139e47d724508d49e50214e5582168b57af5ca20f9218be9'),
    ("<MSG><META><DTTM><X a='1'>y</X></DTTM><DTTM>2</DTTM></META><META><DTTM>z</DTTM></META></MSG>",
     'ada336838714b0592664d017bf2ffdc7062df7c4d2e29815ebd1a44eff52f8ff'),
    ('<MSG><X><META><DTTM>keep</DTTM></META></X><MSG><META><DTTM>keep2</DTTM></META></MSG></MSG>',
     'f652b78ba4168df62b3028b73b20f16f447fe4e3c5cbd9c8e945f21155c03e10'),
    ('<ROOT><META><DTTM>keep</DTTM></META></ROOT>',
     '32f2affba124e8a8bf1ef052cdcd8f88772f13668e818447fe480c540a0679e2'),
    ('<MSG xmlns:a=\'u\' a:b=\'1\' c=\' 2 \' b="it\'s"><!-- c --><?pi x?>  t1 '
     '<a:X a:y=\'1\'> t </a:X>tail<Y/> <Z> \u3000w\xa0 </Z></MSG>',
     'ed48ac0b1968d939d02c3cd124bc847f33a6f3e3b4959d3eb6f4a21db576f59e'),
    ('<MSG>foo<!--c-->bar<A>1<B>2</B>3</A></MSG>',
     '69c1846e906270175d87f7ae79ecea6566a39c35f9275b5937066a014ecf3778'),
    ("<MSG xmlns='urn:d'><META><DTTM>1</DTTM></META><A x='&lt;&amp;' y='\\' z='é'/></MSG>",
     'bd279b42fef5ae469a40b4456a73fb9dd803f7f9d14930803d73b1daa9be48d5'),
    ('<MSG><A><![CDATA[ <x> ]]></A><B>&#10; a &#13;</B></MSG>',
     '8ba98eb5bd7b576be425ca340b4d4ec00c2f2e55d76a82331570ebf80f4d480a'),
]


@pytest.mark.parametrize(("xml", "expected"), PINNED)
def test_canonical_hash_is_unchanged(xml: str, expected: str) -> None:
    root = etree.fromstring(xml.encode(), decode._parser())
    assert first_kind_hash(root) == expected


# --- the walk against the rule, spelled out plainly ------------------------------------------------
def plain_hash(root: etree._Element) -> str:
    """The rule as the first implementation spelled it: every element in document order (``iterwalk``
    start and end events), skipped with its subtree where the open tags read MSG/META/DTTM."""
    import hashlib

    parts: list[str] = []
    stack: list[str] = []
    skip = 0
    for event, el in etree.iterwalk(root, events=("start", "end"), tag=etree.Element):
        if event == "start":
            stack.append(el.tag)
            if skip or stack == ["MSG", "META", "DTTM"]:
                skip += 1
                continue
            attrs = sorted((k, v.strip()) for k, v in el.items() if not k.startswith("{"))
            parts.append(f"<{el.tag}{attrs}>{(el.text or '').strip()}")
        else:
            tag = stack.pop()
            if skip:
                skip -= 1
                continue
            parts.append(f"</{tag}>")
    return hashlib.sha256("".join(parts).encode()).hexdigest()


def test_every_repository_document_hashes_as_the_plain_walk() -> None:
    """The samples, golden cases and bad inputs that parse: the recursive walk and the
    plain one give the same hash."""
    from pathlib import Path

    checked = 0
    for path in sorted((Path(__file__).resolve().parent.parent).rglob("*.xml")):
        try:
            root = decode.parse_xml(path.read_bytes())
        except decode.SisRefused:
            continue
        assert first_kind_hash(root) == plain_hash(root), path
        checked += 1
    assert checked > 300


_LEAVES = st.sampled_from([" t ", "<!-- c -->", "<?p i?>", "<C/>", "\u3000x\xa0", "&amp;", "<![CDATA[ d ]]>", ""])
_TREES = st.recursive(_LEAVES, lambda kids: st.tuples(
    st.sampled_from(["META", "DTTM", "MSG", "A"]), st.sampled_from(["", " x=' 1 ' a='2'", " xmlns:n='u' n:q='1' b=''"]),
    st.lists(kids, max_size=4)).map(lambda t: f"<{t[0]}{t[1]}>{''.join(t[2])}</{t[0]}>"), max_leaves=25)


@given(st.lists(_TREES, max_size=4), st.sampled_from(["MSG", "ROOT"]))
@settings(max_examples=400, deadline=None)
def test_generated_documents_hash_as_the_plain_walk(trees: list[str], root_tag: str) -> None:
    """META/DTTM nested at any level, mixed content, comments, PIs, namespaced and plain
    attributes, CDATA, Unicode whitespace: the same hash."""
    root = etree.fromstring(f"<{root_tag}>{''.join(trees)}</{root_tag}>".encode(), decode._parser())
    assert first_kind_hash(root) == plain_hash(root)
