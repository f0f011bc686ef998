"""What ``POST /cminmsgs/send`` checks before a message may enter the mailbox (US-02 AC1, C-28).

Transport-level soundness: UTF-8, no NUL, not empty, well-formed XML without DOCTYPE, entities
or XInclude (the pump's own ``parse_xml``), and the envelope formats the pump also enforces: a
META value or FLID that breaks its format (``sis.envelope``: SNDR <= 16, SEQN 1-6 digits, ...) is
refused with ``invalid_field`` naming the field, because the pump would dead-letter it. Business
decoding stays with the pump (US-02 "HTTP 基础格式校验不替代 US-03 的业务解码"), so a
well-formed message with an unknown type, or without META, is accepted here and classified by
the pipeline like any other mailbox row.

An XML declaration's ``encoding`` is ignored here as in the pump (decisions F8, encoding declaration): the body is
UTF-8 text whatever the declaration says, and the stored text is read as characters.

Byte-order marks: a UTF-8 BOM is accepted and stripped (some Windows tools prepend one; the
mailbox stores text, and a stored U+FEFF would only confuse other readers). UTF-16/UTF-32 BOMs
are refused as ``unsupported_charset``: the mailbox contract is UTF-8 text.
"""

from __future__ import annotations

import codecs

from msgx_engine.http.errors import ApiError
from msgx_engine.sis.decode import SisRefused, parse_xml
from msgx_engine.sis.envelope import envelope_problem

_FOREIGN_BOMS = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


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
    try:
        # The same call the pump makes on the stored text, so what passes here parses there.
        root = parse_xml(text, max_bytes=max_bytes)
    except SisRefused as exc:
        code = {"forbidden": "forbidden_xml", "oversize": "body_too_large"}.get(exc.reason, "malformed_xml")
        raise ApiError(code, exc.detail) from None
    problem = envelope_problem(root)
    if problem is not None:
        raise ApiError("invalid_field", problem)
    return text
