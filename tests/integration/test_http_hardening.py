"""POST /cminmsgs/send against hostile bodies: XXE (file, http, external DTD, parameter entity,
XInclude), billion laughs, the 10 MiB limit (declared and streamed), invalid UTF-8, byte-order
marks and NUL bytes. Each is refused with its documented code and nothing is inserted
(US-02 AC1, C-28)."""

from __future__ import annotations

import codecs
import itertools

import pytest

from msgx_engine.http.app import create_app
from tests.builders import envelope
from tests.http_support import (
    MIB,
    assert_refused,
    call_asgi,
    client_for,
    connected,
    inbox_count,
    listening_probe,
)

LIMIT = 10 * MIB


def post_xml(app, body: bytes, ctype: str = "text/xml"):
    return client_for(app).post("/cminmsgs/send", content=body, headers={"Content-Type": ctype})


def test_xxe_file_entity_is_refused_and_not_resolved(app, tmp_path):
    """C-28 (解析禁用外部实体): a SYSTEM file entity is refused; the file's content never shows up."""
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT")
    body = (f'<?xml version="1.0"?>\n<!DOCTYPE MSG [<!ENTITY xxe SYSTEM "file://{secret}">]>\n'
            "<MSG><META><SNDR>&xxe;</SNDR></META></MSG>").encode()
    resp = post_xml(app, body)
    assert_refused(resp, 400, "forbidden_xml")
    assert "TOP-SECRET" not in resp.text
    assert inbox_count(app) == 0


@pytest.mark.parametrize("template", [
    '<!DOCTYPE MSG [<!ENTITY xxe SYSTEM "http://127.0.0.1:{port}/x">]><MSG>&xxe;</MSG>',
    '<!DOCTYPE MSG SYSTEM "http://127.0.0.1:{port}/evil.dtd"><MSG/>',
    '<!DOCTYPE MSG [<!ENTITY % p SYSTEM "http://127.0.0.1:{port}/p.dtd"> %p;]><MSG/>',
    '<?xml version="1.0"?>\n<!doctype MSG PUBLIC "-//X//EN" "http://127.0.0.1:{port}/d.dtd"><MSG/>',
], ids=["general-entity", "external-dtd", "parameter-entity", "public-id"])
def test_xxe_network_references_are_refused_without_connecting(app, template):
    """C-28 (禁用外部资源访问): entities and DTDs pointing at a listening socket are refused, and the
    socket saw no connection. The last assertion is the positive control: the probe does see one."""
    with listening_probe() as (port, srv):
        resp = post_xml(app, template.format(port=port).encode())
        assert_refused(resp, 400, "forbidden_xml")
        assert not connected(srv), "the server tried to fetch the external reference"
        import socket

        with socket.create_connection(("127.0.0.1", port), timeout=2):
            assert connected(srv)
    assert inbox_count(app) == 0


def test_xinclude_is_refused_without_connecting(app):
    """C-28: XInclude is an external reference too; refused, never followed."""
    with listening_probe() as (port, srv):
        body = (f'<MSG xmlns:xi="http://www.w3.org/2001/XInclude">'
                f'<xi:include href="http://127.0.0.1:{port}/x" parse="text"/></MSG>').encode()
        assert_refused(post_xml(app, body), 400, "forbidden_xml")
        assert not connected(srv)
    assert inbox_count(app) == 0


def test_billion_laughs_is_refused(app):
    """C-28: entity expansion bombs never expand (the DOCTYPE is refused before parsing)."""
    lols = ['<!ENTITY lol "lol">'] + [
        f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">' for i in range(1, 10)]
    body = f'<?xml version="1.0"?><!DOCTYPE MSG [{"".join(lols)}]><MSG>&lol9;</MSG>'.encode()
    assert_refused(post_xml(app, body), 400, "forbidden_xml")
    assert inbox_count(app) == 0


def padded_message(total: int) -> bytes:
    """A well-formed message of exactly ``total`` bytes, padded with 1 KiB comments (libxml2 caps a
    single text node at 10,000,000 characters, so one big comment would not be well-formed)."""
    head = envelope("FLOP", "GTDT", "\t<FLOP><FLID>1</FLID></FLOP>\n").encode()
    head, tail = head[:-len(b"</MSG>\n")], b"</MSG>\n"
    pad = total - len(head) - len(tail)
    comment = b"<!--" + b"x" * 1017 + b"-->\n"
    full, rest = divmod(pad, len(comment))
    last = b"<!--" + b"y" * (rest - 7) + b"-->" if rest >= 7 else b" " * rest
    return head + comment * full + last + tail


def test_exactly_ten_mib_is_accepted(app):
    """US-02 AC1 / Q3 byte rule: the limit is 10 MiB = 10,485,760 bytes of body, inclusive."""
    body = padded_message(LIMIT)
    assert len(body) == LIMIT
    resp = post_xml(app, body)
    assert resp.status_code == 200, resp.text[:300]
    assert len(app.mailbox.bodies([resp.json()["body"]])[resp.json()["body"]].encode()) == LIMIT


def test_ten_mib_plus_one_byte_is_413(app):
    """US-02 AC1: one byte over the limit is refused, nothing inserted."""
    body = padded_message(LIMIT + 1)
    assert len(body) == LIMIT + 1
    assert_refused(post_xml(app, body), 413, "body_too_large")
    assert inbox_count(app) == 0


def test_declared_oversize_is_refused_before_any_body_byte_is_read(app):
    """US-02 AC1 (checked before reading it all): Content-Length over the limit -> 413 with nothing
    pulled from the connection."""
    asgi = create_app(mailbox=app.mailbox, engine=app.engine)
    res = call_asgi(asgi, "/cminmsgs/send", {"Content-Type": "text/xml", "Content-Length": str(LIMIT + 1)},
                    itertools.repeat(b"x" * 65536, 200))
    assert res.status == 413 and b'"body_too_large"' in res.body
    assert res.pulled == 0
    assert res.headers.get("connection") == "close"
    assert inbox_count(app) == 0


def test_chunked_oversize_stops_reading_just_past_the_limit(app):
    """US-02 AC1 (also chunked bodies): with no Content-Length the body is counted while it streams;
    the app stops pulling within one chunk of the limit although 40 MiB were on offer."""
    chunk = b" " * 65536
    asgi = create_app(mailbox=app.mailbox, engine=app.engine)
    res = call_asgi(asgi, "/cminmsgs/send", {"Content-Type": "text/xml", "Transfer-Encoding": "chunked"},
                    itertools.repeat(chunk, 4 * LIMIT // len(chunk)))
    assert res.status == 413 and b'"body_too_large"' in res.body
    assert LIMIT < res.pulled <= LIMIT + len(chunk)
    assert inbox_count(app) == 0


def test_chunked_body_within_the_limit_is_accepted(app):
    """The streaming reader reassembles a chunked body exactly (control for the test above)."""
    body = envelope("FLOP", "GTDT", "\t<FLOP><FLID>3</FLID></FLOP>\n").encode()
    asgi = create_app(mailbox=app.mailbox, engine=app.engine)
    res = call_asgi(asgi, "/cminmsgs/send", {"Content-Type": "text/xml", "Transfer-Encoding": "chunked"},
                    [body[i:i + 7] for i in range(0, len(body), 7)])
    assert res.status == 200, res.body
    assert inbox_count(app) == 1
    assert list(app.mailbox.bodies([1]).values()) == [body.decode()]


@pytest.mark.parametrize("bad", [b"\xc3\x28", b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe6\x97"],
                         ids=["bad-continuation", "ff", "overlong", "surrogate", "truncated"])
def test_invalid_utf8_is_400(app, bad):
    """US-02 AC1 (默认 UTF-8): bytes that are not UTF-8 are refused, not stored as mojibake."""
    body = b"<MSG><META><SNDR>" + bad + b"</SNDR></META></MSG>"
    assert_refused(post_xml(app, body), 400, "invalid_utf8")
    assert inbox_count(app) == 0


def test_utf8_bom_is_accepted_and_stripped(app):
    """Documented BOM rule (docs/http-api.md): a UTF-8 BOM is accepted and not stored."""
    body = envelope("FLOP", "GTDT", "\t<FLOP><FLID>5</FLID></FLOP>\n")
    resp = post_xml(app, codecs.BOM_UTF8 + body.encode())
    assert resp.status_code == 200, resp.text
    stored = app.mailbox.bodies([resp.json()["body"]])[resp.json()["body"]]
    assert stored == body and not stored.startswith("\ufeff")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
def test_utf16_and_utf32_bodies_with_bom_are_415(app, encoding):
    """Documented BOM rule: UTF-16/UTF-32 byte-order marks are refused as unsupported_charset."""
    text = "<MSG><A>x</A></MSG>"
    body = text.encode(encoding)
    if encoding == "utf-16-be":
        body = codecs.BOM_UTF16_BE + body
    assert_refused(post_xml(app, body), 415, "unsupported_charset")
    assert inbox_count(app) == 0


@pytest.mark.parametrize("body", [b"<MSG><A>a\x00b</A></MSG>", b"\x00<MSG/>", b"<MSG/>\x00",
                                  codecs.BOM_UTF8 + b"<MSG>\x00</MSG>"])
def test_nul_bytes_are_400(app, body):
    """US-02 AC1: a NUL anywhere (the mailbox CLOB and XML both forbid it) is refused."""
    assert_refused(post_xml(app, body), 400, "nul_byte")
    assert inbox_count(app) == 0
