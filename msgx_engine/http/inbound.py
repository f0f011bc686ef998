"""What ``POST /cminmsgs/send`` checks before a message may enter the mailbox (US-02 AC1, C-28).

Only transport-level soundness: UTF-8, no NUL, not empty, well-formed XML without DOCTYPE,
entities or XInclude. Business decoding stays with the pump (US-02 "HTTP 基础格式校验不替代
US-03 的业务解码"), so a well-formed message with an unknown type is accepted here and classified
by the pipeline like any other mailbox row.

Byte-order marks: a UTF-8 BOM is accepted and stripped (some Windows tools prepend one; the
mailbox stores text, and a stored U+FEFF would only confuse other readers). UTF-16/UTF-32 BOMs
are refused as ``unsupported_charset``: the mailbox contract is UTF-8 text.
"""

from __future__ import annotations

import codecs
import re

from msgx_engine.http.errors import ApiError
from msgx_engine.sis.decode import SisRefused, parse_xml

XINCLUDE_NS = "http://www.w3.org/2001/XInclude"
_FOREIGN_BOMS = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
_UTF8_NAMES = frozenset({"utf-8", "utf8", "us-ascii", "ascii"})
_DECLARED_ENCODING = re.compile(r"""^\s*<\?xml\s[^>]*?encoding\s*=\s*["']([^"']*)["']""")


def _decode(data: bytes) -> str:
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    elif data.startswith(_FOREIGN_BOMS):
        raise ApiError("unsupported_charset", "UTF-16/UTF-32 byte-order mark: bodies must be UTF-8")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError("invalid_utf8", f"invalid UTF-8 at byte {exc.start}: {exc.reason}") from None


def validate_message(data: bytes, *, max_bytes: int) -> str:
    """The text to store, or ApiError with the documented code. Pure: no I/O."""
    text = _decode(data)
    if "\x00" in text:
        raise ApiError("nul_byte", f"NUL character at offset {text.index(chr(0))}")
    if not text.strip():
        raise ApiError("empty_body", "the message is empty")
    declared = _DECLARED_ENCODING.match(text[:200])
    if declared and declared[1].lower() not in _UTF8_NAMES:
        # The pump parses the stored text by its declaration: another encoding would be misread later.
        raise ApiError("unsupported_charset", f"XML declaration says encoding={declared[1]!r}; bodies are UTF-8")
    try:
        # The same call the pump makes on the stored text, so what passes here parses there.
        root = parse_xml(text, max_bytes=max_bytes)
    except SisRefused as exc:
        code = {"forbidden": "forbidden_xml", "oversize": "body_too_large"}.get(exc.reason, "malformed_xml")
        raise ApiError(code, exc.detail) from None
    if next(root.iter(f"{{{XINCLUDE_NS}}}*"), None) is not None:
        raise ApiError("forbidden_xml", "XInclude elements are not accepted")
    return text
