"""The canonical payload hash (sis/decode.py) is stored and compared across versions: these
values were computed by the implementation before issue 16 made the walk cheaper, over the edge
cases of its rule (META/DTTM only as MSG/META/DTTM, namespaced attributes left out, sorted and
stripped attributes, text before the first child only, comments, PIs, tails, CDATA, Unicode
whitespace). tests/unit/test_sis_corpus.py pins the corpus's hashes the same way."""

from __future__ import annotations

import pytest
from lxml import etree

from msgx_engine.sis import decode

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
    assert decode._canonical_hash(root) == expected
