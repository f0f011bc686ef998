"""Hardened SIS decoding: text in, (META, kind, body) out, or a classified refusal.

The parser never loads a DTD, resolves an entity, processes an XInclude or touches the network; a
DOCTYPE is refused outright (no SIS message carries one, and it is the door for XXE and entity
expansion), and so is any XInclude element (refused, never expanded: msgx never calls
``xinclude()``, and a message that asks for one is not a SIS message). Size and depth are bounded
before and during the parse. A body handed over (``hasher``, the pipeline's offload helper) has its
depth and XInclude checks made there (P32, tree checks in the helper): its message's ``refusal`` gives their verdict,
which the pump takes before anything of the message commits, and before any other refusal of it.

A message is Unicode text (decisions F8, encoding declaration): the mailbox column holds characters, and the HTTP door
accepts UTF-8 only. An XML declaration's ``encoding`` is therefore ignored on every path: the
parser is told the bytes it gets are UTF-8, so ``encoding="ISO-8859-1"`` over the text cannot
turn it into mojibake. Text that is not valid Unicode (lone surrogates, the trace of bytes the
mailbox stored that are not UTF-8) or bytes that are not UTF-8 are refused as
``malformed`` with a detail starting ``encoding:``. A leading byte-order mark is dropped.

META and every FLID are checked against their formats (``sis.envelope``) before the message
leaves the decoder, so nothing oversized reaches an identity binding or an index.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from lxml import etree

from msgx_engine.sis.catalogue import REFERENCE_TYPES
from msgx_engine.sis.content_hash import body_hash
from msgx_engine.sis.envelope import META_FIELDS, flid_problem, meta_problem, meta_values

MAX_BODY_BYTES = 10 * 1024 * 1024
MAX_DEPTH = 16
_DOCTYPE_RE = re.compile(rb"<!\s*(DOCTYPE|ENTITY)", re.IGNORECASE)
# XInclude 1.0 and the 2001 draft namespace libxml2 also honours.
XINCLUDE_NAMESPACES = ("http://www.w3.org/2001/XInclude", "http://www.w3.org/2003/XInclude")
_XINCLUDE_TAGS = tuple(f"{{{ns}}}*" for ns in XINCLUDE_NAMESPACES)


class SisRefused(ValueError):
    """The text is not a usable SIS message. ``reason`` is the recorded classification."""

    def __init__(self, reason: str, detail: str, meta: Meta | None = None) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.meta = meta      # set when META was readable (ignore rules still apply, US-04)


@dataclass(frozen=True)
class Meta:
    sndr: str
    seqn: str
    dttm: str
    type: str
    styp: str

    @property
    def identity(self) -> str:
        """Business identity SNDR|TYPE|STYP|SEQN (US-03 AC3)."""
        return f"{self.sndr}|{self.type}|{self.styp}|{self.seqn}"

    @property
    def type_styp(self) -> str:
        return f"{self.type}-{self.styp}"


class Handover(Protocol):
    """Whoever took a body's bytes before the parse (the pipeline's offload helper, ``decode``'s
    ``hasher``): it hashes them and makes the tree checks elsewhere, so the message it makes
    (``message``) answers ``payload_hash`` and ``refusal`` from that work."""

    def message(self, meta: Meta, kind: str, root: etree._Element) -> SisMessage: ...


Hasher = Callable[[bytes], Handover | None]


@dataclass(frozen=True)
class SisMessage:
    """A decoded message: a plain value. ``decode`` made every check of it and hashed it."""

    meta: Meta
    kind: str                 # FLOP | SCHD | SCHS | REF | RQFD | RQRD | EROR | OTHER
    root: etree._Element      # the MSG element; handlers read, never modify
    hashed: str = field(default="", repr=False)     # the canonical content hash (``payload_hash``)

    @property
    def payload_hash(self) -> str:
        """The canonical content hash (the identity's duplicate check)."""
        return self.hashed

    def refusal(self, *, here: bool = False) -> SisRefused | None:
        """The refusal of tree checks still to be made: none here, ``decode`` made them all (a
        message whose body was handed over makes them where it was handed, P32)."""
        return None

    def body(self, name: str) -> etree._Element | None:
        return self.root.find(name)


def _parser() -> etree.XMLParser:
    """No DTD, no entities, no network, no huge trees; ``encoding`` overrides whatever the XML
    declaration says, because the bytes handed over are always the UTF-8 of Unicode text."""
    return etree.XMLParser(
        encoding="utf-8",
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        dtd_validation=False,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )


def _too_deep(root: etree._Element, limit: int) -> bool:
    """An element nested deeper than ``limit`` (the root is at depth 1), found by libxml2's XPath
    in C: a 10,000-flight package costs milliseconds, not a Python walk of every element."""
    return bool(root.xpath("boolean(" + "/*" * (limit + 1) + ")"))


def _utf8(text: str | bytes) -> bytes:
    """The UTF-8 bytes of the message text, without a leading byte-order mark. Bytes must already
    be UTF-8 and text must be valid Unicode; anything else is refused as an encoding problem."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SisRefused("malformed", f"encoding: invalid UTF-8 at byte {exc.start} "
                                          f"({exc.object[exc.start:exc.start + 4].hex(' ')})") from None
    text = text.removeprefix("\ufeff")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        # The mailbox adapter keeps a row's undecodable bytes as lone surrogates (surrogateescape).
        raw = text[exc.start:exc.end].encode("utf-8", "surrogateescape") if _escaped(text[exc.start]) else b""
        shown = f"bytes {raw.hex(' ')}" if raw else f"U+{ord(text[exc.start]):04X}"
        raise SisRefused("malformed", f"encoding: not valid UTF-8/Unicode text at character {exc.start} "
                                      f"({shown}: {exc.reason})") from None


def _escaped(ch: str) -> bool:
    """A surrogateescape stand-in for one undecodable byte (U+DC80..U+DCFF)."""
    return 0xDC80 <= ord(ch) <= 0xDCFF


def _xinclude(root: etree._Element) -> etree._Element | None:
    """The first element in either XInclude namespace, found in one walk of the tree."""
    return next(root.iter(*_XINCLUDE_TAGS), None)


def parse_xml(text: str | bytes, *, max_bytes: int = MAX_BODY_BYTES, max_depth: int = MAX_DEPTH) -> etree._Element:
    """Parse untrusted XML safely; raise SisRefused(malformed|oversize|forbidden) otherwise."""
    return _parse_utf8(_utf8(text), max_bytes, max_depth)


def _parse_utf8(data: bytes, max_bytes: int, max_depth: int) -> etree._Element:
    _check_bytes(data, max_bytes)
    return _parse_checked(data, max_depth)


def _check_bytes(data: bytes, max_bytes: int) -> None:
    """The refusals that need no parse: size, emptiness, NUL bytes, DTD declarations. The tests
    that stop at the first byte they can (``isspace``) or look for one byte (``in``, C's
    ``memchr``) come first: a 10 MB body costs 1 ms here, not the 6 ms of a copy and a regex."""
    if len(data) > max_bytes:
        raise SisRefused("oversize", f"{len(data)} bytes exceeds the limit of {max_bytes}")
    if not data or data.isspace():              # ASCII whitespace only: what ``strip`` would empty
        raise SisRefused("malformed", "empty message")
    if b"\x00" in data:
        raise SisRefused("malformed", "NUL byte in message")
    if b"!" in data and _DOCTYPE_RE.search(data):       # no declaration without its ``<!``
        raise SisRefused("forbidden", "DOCTYPE/ENTITY declarations are not accepted")


def _parse_checked(data: bytes, max_depth: int) -> etree._Element:
    """The tree of bytes ``_check_bytes`` let through, refused when not well-formed, too deep, or
    asking for an XInclude."""
    root = _parse_tree(data)
    refused = tree_refusal(root, max_depth, data)
    if refused is not None:
        raise refused
    return root


def _parse_tree(data: bytes) -> etree._Element:
    """The tree of bytes ``_check_bytes`` let through, refused when not well-formed. libxml2 still
    caps its depth at 256 (``huge_tree=False``) and expands no XInclude, so code may read a tree
    the checks of ``tree_refusal`` have not judged yet, as long as nothing of it is kept (P32)."""
    try:
        root = etree.fromstring(data, _parser())
    except etree.XMLSyntaxError as exc:
        raise SisRefused("malformed", f"not well-formed: {exc}") from None
    if root is None:
        raise SisRefused("malformed", "no root element")
    return root


def tree_refusal(root: etree._Element, max_depth: int = MAX_DEPTH, data: bytes | None = None) -> SisRefused | None:
    """The checks of a whole parsed tree, in their order: nesting deeper than ``max_depth``, then
    any XInclude element. Two walks of every element (0.09 s for a 10,000-flight package), which
    the offload helper makes for a large body while the pump goes on (P32). With the tree's bytes
    (``data``), the second walk is made only when they could declare an XInclude namespace."""
    if _too_deep(root, max_depth):
        return SisRefused("malformed", f"nesting deeper than {max_depth}")
    if (data is None or _may_include(data)) and _xinclude(root) is not None:
        return SisRefused("forbidden", "XInclude elements are not accepted (never expanded)")
    return None


def _may_include(data: bytes) -> bool:
    """Whether ``data`` could bind a prefix to an XInclude namespace: its URI is spelled out, or
    written with character references (``&#``). No other spelling reaches the parser: a DOCTYPE,
    and so any other entity, is refused first, and the predefined entities spell no letter."""
    return b"XInclude" in data or (b"&" in data and b"&#" in data)


def _text(el: etree._Element | None) -> str:
    return (el.text or "").strip() if el is not None else ""


def _kind(mtype: str) -> str:
    if mtype in ("FLOP", "SCHD", "SCHS", "RQFD", "RQRD", "EROR"):
        return mtype
    if mtype in REFERENCE_TYPES:
        return "REF"
    return "OTHER"


def _check_structure(kind: str, meta: Meta, root: etree._Element) -> None:
    if kind == "FLOP":
        blocks = root.findall("FLOP")
        if not blocks:
            raise SisRefused("malformed", "FLOP message without a FLOP block")
        for block in blocks:
            if not _text(block.find("FLID")):
                raise SisRefused("malformed", "FLOP block without FLID")
    elif kind in ("SCHD", "SCHS"):
        if root.find(kind) is None:
            raise SisRefused("malformed", f"{kind} message without a {kind} container")
    elif kind == "REF":
        records = root.findall(meta.type)
        if not records and meta.styp not in ("DNLD", "RESP"):
            raise SisRefused("malformed", f"{meta.type}/{meta.styp} without any {meta.type} record")


def decode(text: str | bytes, *, max_bytes: int = MAX_BODY_BYTES, hasher: Hasher | None = None) -> SisMessage:
    """Decode one mailbox body. Raises SisRefused with reason malformed/oversize/forbidden.

    ``hasher`` may take the body's bytes to hash them and make the tree checks elsewhere (the
    pump's ``pipeline.large_bodies.offload.submit`` for large bodies); the message is then its ``Handover``'s.
    When it returns None, everything is done here. It takes them as soon as their bytes pass the
    checks that need no parse, so that the other process parses them while this one does (P27, offload helper
    extraction); a body refused later leaves it work nobody reads (``offload`` drops it)."""
    data = _utf8(text)
    _check_bytes(data, max_bytes)
    pending = hasher(data) if hasher is not None else None
    if pending is None:
        return _decoded(data, _parse_checked(data, MAX_DEPTH), None)
    # The helper checks the tree too (P32); any refusal found here first gives way to its checks,
    # which come first in decode's order.
    root = _parse_tree(data)
    try:
        return _decoded(data, root, pending)
    except SisRefused:
        refused = tree_refusal(root, MAX_DEPTH, data)
        if refused is not None:
            raise refused from None
        raise


def _decoded(data: bytes, root: etree._Element, pending: Handover | None) -> SisMessage:
    """The message of a parsed body (``pending``: who took it, which also makes the tree checks),
    or the refusal of its envelope or structure."""
    if root.tag != "MSG":
        raise SisRefused("malformed", f"root element is <{root.tag}>, expected <MSG>")
    values = meta_values(root)
    if values is None:
        raise SisRefused("malformed", "no META element")
    missing = [n for n in META_FIELDS if n not in values]
    if missing:
        raise SisRefused("malformed", f"META lacks {', '.join(missing)}")
    meta = Meta(values["SNDR"], values["SEQN"], values["DTTM"], values["TYPE"].upper(), values["STYP"].upper())
    problem = meta_problem(values)       # before anything binds the identity
    if problem is not None:
        # A refusal is never bound; its META goes along so that an ignore rule still skips an
        # ignored type whatever its body looks like (US-04).
        raise SisRefused("malformed", problem, meta)
    problem = flid_problem(root)
    if problem is not None:
        raise SisRefused("malformed", problem, meta)
    kind = _kind(meta.type)
    try:
        _check_structure(kind, meta, root)
    except SisRefused as exc:
        raise SisRefused(exc.reason, exc.detail, meta) from None
    if pending is not None:
        return pending.message(meta, kind, root)
    return SisMessage(meta=meta, kind=kind, root=root, hashed=body_hash(root, len(data)))
