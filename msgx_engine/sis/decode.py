"""Hardened SIS decoding: bytes in, (META, kind, body) out, or a classified refusal.

The parser never loads a DTD, resolves an entity or touches the network; a DOCTYPE is refused
outright (no SIS message carries one, and it is the door for XXE and entity expansion). Size and
depth are bounded before and during the parse.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from lxml import etree

from msgx_engine.sis.catalogue import REFERENCE_TYPES

MAX_BODY_BYTES = 10 * 1024 * 1024
MAX_DEPTH = 16
META_FIELDS = ("SNDR", "SEQN", "DTTM", "TYPE", "STYP")
_TYPE_RE = re.compile(r"^[A-Z]{3,4}$")
_DOCTYPE_RE = re.compile(rb"<!\s*(DOCTYPE|ENTITY)", re.IGNORECASE)


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


@dataclass(frozen=True)
class SisMessage:
    meta: Meta
    kind: str                 # FLOP | SCHD | SCHS | REF | RQFD | RQRD | EROR | OTHER
    root: etree._Element      # the MSG element; handlers read, never modify
    payload_hash: str         # canonical content hash (identity duplicate check)

    def body(self, name: str) -> etree._Element | None:
        return self.root.find(name)


def _parser() -> etree.XMLParser:
    return etree.XMLParser(
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


def _to_bytes(text: str | bytes) -> bytes:
    if isinstance(text, bytes):
        return text
    return text.encode("utf-8")


def parse_xml(text: str | bytes, *, max_bytes: int = MAX_BODY_BYTES, max_depth: int = MAX_DEPTH) -> etree._Element:
    """Parse untrusted XML safely; raise SisRefused(malformed|oversize|forbidden) otherwise."""
    data = _to_bytes(text)
    if len(data) > max_bytes:
        raise SisRefused("oversize", f"{len(data)} bytes exceeds the limit of {max_bytes}")
    if not data.strip():
        raise SisRefused("malformed", "empty message")
    if b"\x00" in data:
        raise SisRefused("malformed", "NUL byte in message")
    if _DOCTYPE_RE.search(data):
        raise SisRefused("forbidden", "DOCTYPE/ENTITY declarations are not accepted")
    if isinstance(text, str):
        # lxml refuses str input that carries an encoding declaration; bytes keep the declaration honest.
        data = text.encode("utf-8")
    try:
        root = etree.fromstring(data, _parser())
    except etree.XMLSyntaxError as exc:
        raise SisRefused("malformed", f"not well-formed: {exc}") from None
    if root is None:
        raise SisRefused("malformed", "no root element")
    if _too_deep(root, max_depth):
        raise SisRefused("malformed", f"nesting deeper than {max_depth}")
    return root


def _text(el: etree._Element | None) -> str:
    return (el.text or "").strip() if el is not None else ""


_DTTM_PATH = ["MSG", "META", "DTTM"]


def _canonical_hash(root: etree._Element) -> str:
    """Hash of the content without formatting whitespace and without META/DTTM (a resend with a
    new timestamp is still the same message): per element ``<TAG[sorted (attr, value)]>text``, its
    children, ``</TAG>``. Stored hashes are compared across versions, so these bytes never change;
    one flat walk (no recursion) and one digest update keep a 10 MB package cheap."""
    parts: list[str] = []
    add = parts.append
    path: list[str] = []
    skip = 0                                  # > 0: inside META/DTTM
    for event, el in etree.iterwalk(root, events=("start", "end")):
        tag = el.tag
        if not isinstance(tag, str):
            continue
        if event == "start":
            path.append(tag)
            if skip or path == _DTTM_PATH:
                skip += 1
                continue
            attrib = el.attrib
            attrs = sorted((k, v.strip()) for k, v in attrib.items() if not k.startswith("{")) if attrib else []
            add(f"<{tag}{attrs}>{(el.text or '').strip()}")
        else:
            path.pop()
            if skip:
                skip -= 1
                continue
            add(f"</{tag}>")
    return hashlib.sha256("".join(parts).encode()).hexdigest()


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


def decode(text: str | bytes, *, max_bytes: int = MAX_BODY_BYTES) -> SisMessage:
    """Decode one mailbox body. Raises SisRefused with reason malformed/oversize/forbidden."""
    root = parse_xml(text, max_bytes=max_bytes)
    if root.tag != "MSG":
        raise SisRefused("malformed", f"root element is <{root.tag}>, expected <MSG>")
    meta_el = root.find("META")
    if meta_el is None:
        raise SisRefused("malformed", "no META element")
    values = {name: _text(meta_el.find(name)) for name in META_FIELDS}
    missing = [n for n, v in values.items() if not v]
    if missing:
        raise SisRefused("malformed", f"META lacks {', '.join(missing)}")
    meta = Meta(values["SNDR"], values["SEQN"], values["DTTM"], values["TYPE"].upper(), values["STYP"].upper())
    if not _TYPE_RE.match(meta.type):
        raise SisRefused("malformed", f"META TYPE {meta.type!r} is not a SIS type code")
    kind = _kind(meta.type)
    try:
        _check_structure(kind, meta, root)
    except SisRefused as exc:
        raise SisRefused(exc.reason, exc.detail, meta) from None
    return SisMessage(meta=meta, kind=kind, root=root, payload_hash=_canonical_hash(root))
