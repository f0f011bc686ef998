"""The canonical content hash of a body: INV-9's duplicate check (same identity, same content).

What counts as the same content has not changed since the first implementation (P17, one-pass extraction): every
element's tag, its attributes without namespaced ones, sorted, values stripped, the text before
its first child, stripped, and its children, in order; tails, comments, processing instructions,
formatting whitespace and ``MSG/META/DTTM`` (a resend carries a new timestamp) do not count.

Two kinds of hash of that content exist, because stored hashes are compared across versions:

* the first kind (``first_kind_hash``, 64 hex digits, no prefix) hashes a string built element by
  element in Python: about 2 µs per element, which for a 10,000-flight package is a fifth of all
  the CPU it costs (docs/benchmarks.md, run 27);
* the second kind (``content_hash``, ``c2:`` and 64 hex digits) hashes another spelling of the same
  content, which lxml's serializer writes in C for nearly every real body (``_fast``): tags,
  attributes and escaped texts as serialized, with the blank texts and tails between tags
  dropped and the attributes of a tag sorted. A body the fast spelling cannot represent exactly
  (namespaces below the root, whitespace at the edge of an attribute value or of a text, a
  non-blank tail, an escaped control character) is spelled by ``_walk``, which writes the same
  string for any body both can spell (tests/unit/test_content_hash.py): a third to a quarter of
  the first kind's time on a large package.

``body_hash`` picks the kind by the body's size: below ``SECOND_KIND_BYTES`` the first kind's walk
costs less than the serializer and its checks (65 µs against 89 µs for a GTDT), so the bindings of
ordinary messages keep the first kind. Each spelling is injective on the content (names cannot
hold ``>``, ``"``, ``=`` or spaces, text holds no ``<``, attribute values no ``"``), so two bodies
have equal hashes of one kind exactly when they have the same content, and ``same_content``
compares hashes of different kinds by hashing the newer body in the stored one's kind.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable

from lxml import etree

KIND = "c2:"
SECOND_KIND_BYTES = 1_000_000    # the offload helper's threshold too (pipeline/large_bodies/offload.py)

_WS = rb"[ \t\n\r\x0b\x0c]"
_GAPS = re.compile(rb">" + _WS + rb"+<")            # whitespace between tags: blank texts and tails
_EDGE = re.compile(rb">" + _WS)                     # ... any left is at the edge of a text or tail
_EDGE_REVERSED = re.compile(rb"<" + _WS)            # the same before a tag, in the reversed bytes
_TAILS = (re.compile(rb"</[^>]*>[^<]"), re.compile(rb"/>[^<]"))    # a tail that is not blank
# In the reversed bytes: ``></`` right after an opening tag, i.e. ``<X></X>``, an element whose
# text was blank (lxml writes an element with no text at all as ``<X/>``).
_BLANK_LEAF_REVERSED = re.compile(rb"/<>(?!/)(?:[^<]*[^</])?<")
# What only _walk spells: namespaces, escaped control characters (\t \n \r), an attribute value
# with a space at its edge, and the nodes decode's parser never keeps (comments, PIs, CDATA); and
# Unicode whitespace (U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F,
# U+3000), which str.strip removes and the byte patterns above do not. Text holding one of these
# sends a body to _walk too.
_WALK_ONLY = (b"xmlns", b" xml:", b"&#", b'=" ', b' "', b"<!", b"<?")
# The same markers, each behind a cheaper test that every occurrence passes: a byte looked for by
# C's ``memchr`` (``&``, ``!``, ``?``: absent from most bodies) or a prefix both share (``xml``).
# Seven scans of a 10 MB spelling took 48 ms; these take about 20 (run 34).
_MARKER_TESTS = ((b"xml", (b"xmlns", b" xml:")), (b"&", (b"&#",)), (b"!", (b"<!",)), (b"?", (b"<?",)),
                 (b'"', (b'=" ', b' "')))
# A second attribute (lxml writes them in document order, the rule sorts them), and the parts of
# the tag it is in.
_SECOND = re.compile(rb'" [^\s=>"<]+="')
_TAG = re.compile(rb'<([^\s/>]+)((?: [^\s=>"<]+="[^"]*")+)(/?)>')
_ATTR = re.compile(rb' ([^\s=>"<]+)="([^"]*)"')
_UNICODE_WS = re.compile(rb"\xc2[\x85\xa0]|\xe1\x9a\x80|\xe2(?:\x80[\x80-\x8a\xa8\xa9\xaf]|\x81\x9f)|\xe3\x80\x80")


def content_hash(root: etree._Element) -> str:
    """The second kind of content hash of the tree under ``root``."""
    spelled = _fast(root)
    if spelled is None:
        parts: list[str] = []
        _walk(root, _skipped(root), parts.append)
        spelled = "".join(parts).encode()
    return KIND + hashlib.sha256(spelled).hexdigest()


def body_hash(root: etree._Element, size: int) -> str:
    """The hash a body of ``size`` bytes is bound with: the second kind from ``SECOND_KIND_BYTES``."""
    return content_hash(root) if size >= SECOND_KIND_BYTES else first_kind_hash(root)


def same_content(stored: str | None, newer: str, root: etree._Element) -> bool:
    """Whether a binding's stored hash and a newer body (its hash ``newer``, its tree ``root``)
    are of the same content, whichever kind each is of."""
    if stored is None:
        return False
    second = stored.startswith(KIND)
    if second == newer.startswith(KIND):
        return stored == newer
    return stored == (content_hash(root) if second else first_kind_hash(root))


def _skipped(root: etree._Element) -> frozenset[etree._Element]:
    """The ``MSG/META/DTTM`` elements, which do not count."""
    if root.tag != "MSG":
        return frozenset()
    return frozenset(d for meta in root.iterchildren("META") for d in meta.iterchildren("DTTM"))


def _fast(root: etree._Element) -> bytes | None:
    """The spelling from lxml's serializer, or None when it cannot spell this tree exactly. The
    tree is not changed: the root, and a META holding a skipped DTTM, are spelled by ``_walk``'s
    rule around their other children, each serialized on its own. Spelling the root here also
    leaves out what real bodies carry on it (``xmlns:xsi`` and ``xsi:noNamespaceSchemaLocation``:
    a declaration and a namespaced attribute, neither of them content), which lxml repeats on
    every child it serializes alone (``_serialized`` cuts it there)."""
    skipped = _skipped(root)
    prefixes = _root_prefixes(root)
    inherited = b"".join(b' xmlns:%s="%s"' % (prefix, uri) for prefix, uri in prefixes)
    pieces: list[bytes] = []
    for child in _elements(root):
        if child.tag == "META" and any(d in skipped for d in child):
            kept = [_serialized(c, inherited) for c in _elements(child) if c not in skipped]
            if None in kept:
                return None
            pieces.append(_framed(child, b"".join(kept)))       # type: ignore[arg-type]
        else:
            piece = _serialized(child, inherited)
            if piece is None:
                return None
            pieces.append(piece)
    spelled = _framed(root, b"".join(pieces))
    # a prefixed name below the root: its declaration was the root's, so nothing above shows it
    if any(b"<%s:" % p in spelled or b" %s:" % p in spelled for p, _ in prefixes):
        return None
    return _checked(spelled)


def _root_prefixes(root: etree._Element) -> list[tuple[bytes, bytes]]:
    """The root's prefixed namespace declarations as (prefix, escaped URI): lxml writes them again
    on an element serialized without its parent (``_serialized`` cuts them there). A default
    namespace makes every tag namespaced, which only _walk spells."""
    return [(prefix.encode(), _attr(uri).encode()) for prefix, uri in root.nsmap.items() if prefix is not None]


def _framed(el: etree._Element, inner: bytes) -> bytes:
    """``el`` around already serialized children, as lxml would write it (before ``_checked``)."""
    head: list[str] = []
    text = _open(el, head.append)
    if not text and not inner:
        return "".join(head).encode() + b"/>"
    return "".join(head).encode() + b">" + text.encode() + inner + f"</{_name(el)}>".encode()


def _serialized(el: etree._Element, inherited: bytes) -> bytes | None:
    """``el`` as lxml writes it alone, without the root's declarations it repeats (None: they were
    not where expected, so this tree is for _walk)."""
    if el.tag[0] == "{":
        return None                     # a namespaced tag: only _walk spells it
    written = etree.tostring(el, encoding="UTF-8", xml_declaration=False, with_tail=False)
    if not inherited:
        return written
    at = len(el.tag) + 1
    if written[at:at + len(inherited)] != inherited:
        return None
    return written[:at] + written[at + len(inherited):]


def _checked(serialized: bytes) -> bytes | None:
    """Serialized elements with the blank texts and tails between tags dropped, or None when what
    is left holds anything ``_walk`` alone spells exactly."""
    if _walk_only(serialized):
        return None
    if not serialized.isascii() and _UNICODE_WS.search(serialized):
        return None
    # Whitespace right after a tag: a gap to drop, or a text or tail starting with it. Without any,
    # there is no gap and nothing at an edge there: one search instead of a substitution and a search.
    edge = _EDGE.search(serialized) is not None
    gapless = _GAPS.sub(b"><", serialized) if edge else serialized
    spelled = _sorted_attributes(gapless) if b'" ' in gapless else gapless
    if spelled is None:
        return None
    if (edge and _EDGE.search(spelled)) or any(tail.search(spelled) for tail in _TAILS):
        return None
    reversed_ = spelled[::-1]
    if _EDGE_REVERSED.search(reversed_):
        return None
    if b"></" in spelled and _BLANK_LEAF_REVERSED.search(reversed_):     # ``></``: where a blank leaf shows
        return None
    return spelled


def _walk_only(serialized: bytes) -> bool:
    """Whether the spelling holds one of ``_WALK_ONLY``'s markers (``_MARKER_TESTS``' way)."""
    return any(test in serialized and any(marker in serialized for marker in markers)
               for test, markers in _MARKER_TESTS)


def _sorted_attributes(spelled: bytes) -> bytes | None:
    """Every tag with two attributes or more rewritten with them sorted by name (UTF-8 sorts as
    the code points do); None when such a tag is not as lxml writes tags. A ``" x="`` outside a
    tag is text, written as it is by both spellings."""
    out: list[bytes] = []
    done = 0
    for found in _SECOND.finditer(spelled):
        at = found.start()
        if at < done:
            continue                    # in a tag already rewritten
        start = spelled.rfind(b"<", done, at)
        if start < 0 or spelled.find(b">", start, at) >= 0:
            continue                    # text
        end = spelled.find(b">", at) + 1
        tag = _TAG.fullmatch(spelled, start, end)
        if tag is None:
            return None
        attributes = b"".join(b' %s="%s"' % pair for pair in sorted(_ATTR.findall(tag.group(2))))
        out += (spelled[done:start], b"<", tag.group(1), attributes, tag.group(3), b">")
        done = end
    out.append(spelled[done:])
    return b"".join(out)


def _elements(el: etree._Element) -> list[etree._Element]:
    """The child elements (the parser keeps no comments or PIs; no DTD, so no entity nodes)."""
    return [c for c in el if type(c.tag) is str]


def _name(el: etree._Element) -> str:
    tag = el.tag
    if tag[0] != "{":
        return tag
    uri, local = tag[1:].split("}", 1)           # namespaced: only _walk spells these
    return "{" + _attr(uri).replace(" ", "&#32;") + "}" + local


def _open(el: etree._Element, add: Callable[[str], object]) -> str:
    """Add ``<NAME`` and its attributes (sorted, stripped, without namespaced ones) as lxml writes
    them; return the element's stripped text, escaped."""
    items = sorted((k, v.strip()) for k, v in el.items() if not k.startswith("{"))
    add("<" + _name(el) + "".join(f' {k}="{_attr(v)}"' for k, v in items))
    text = el.text
    return _text(text.strip()) if text else ""


def _walk(el: etree._Element, skipped: frozenset[etree._Element], add: Callable[[str], object]) -> None:
    text = _open(el, add)
    children = [c for c in _elements(el) if c not in skipped]
    if not text and not children:
        add("/>")
        return
    add(">" + text)
    for child in children:
        _walk(child, skipped, add)
    add(f"</{_name(el)}>")


def _text(value: str) -> str:
    """libxml2's escaping of text content."""
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\r", "&#13;")


def _attr(value: str) -> str:
    """libxml2's escaping of an attribute value."""
    return (value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
            .replace("\n", "&#10;").replace("\r", "&#13;").replace("\t", "&#9;"))


def first_kind_hash(root: etree._Element) -> str:
    """The first kind: a string of ``<TAG[sorted (attr, value)]>text``, children, ``</TAG>`` per
    element, hashed. Its bytes never change (tests/unit/test_canonical_hash.py pins them and holds
    this walk equal to the plain one): the inner ``walk`` recurses only into elements that have
    children (the depth is capped by ``parse_xml``), reads each element's attributes and text
    once and builds each tag's opening and closing strings once."""
    parts: list[str] = []
    add = parts.append
    opening: dict[str, str] = {}
    closing: dict[str, str] = {}
    skip_dttm = root.tag == "MSG"

    def walk(elements: Iterable[etree._Element], level: int, parent: str) -> None:
        for el in elements:
            tag = el.tag
            if type(tag) is not str:          # a comment, a processing instruction or an entity
                continue
            if level == 2 and tag == "DTTM" and parent == "META" and skip_dttm:
                continue
            items = el.items()
            text = el.text
            if items:
                head = f"<{tag}{sorted((k, v.strip()) for k, v in items if not k.startswith('{'))}>"
            else:
                head = opening.get(tag) or opening.setdefault(tag, f"<{tag}[]>")
            add(head + text.strip() if text else head)
            if len(el):
                walk(el, level + 1, tag)
            add(closing.get(tag) or closing.setdefault(tag, f"</{tag}>"))

    walk((root,), 0, "")
    return hashlib.sha256("".join(parts).encode()).hexdigest()
