"""The envelope formats and the text rules of the decoder (decisions F7-F9).

Pure: ``sis.envelope`` and ``sis.decode`` on strings and bytes, no server."""

from __future__ import annotations

import pytest
from lxml import etree

from msgx_engine.mailbox.adapter import body_text
from msgx_engine.sis.decode import SisRefused, decode, parse_xml
from msgx_engine.sis.envelope import envelope_problem, field_problem
from tests.builders import envelope, flop, gtdt


@pytest.mark.parametrize(("name", "value"), [
    ("SNDR", "AODB"), ("SNDR", "A" * 16), ("SNDR", "OSH5"),
    ("SEQN", "1"), ("SEQN", "000001"), ("SEQN", "999999"),
    ("TYPE", "FLOP"), ("TYPE", "LDM"), ("STYP", "ADD"), ("STYP", "gtdt"),
    ("DTTM", "20261130235959"), ("DTTM", "20240229000000"),
    ("FLID", "121112312"), ("FLID", "9" * 12), ("FLID", "CA100"),
])
def test_valid_envelope_values_pass(name, value):
    """Item 5: the formats (SIS §2 META, FLID Number(1-12)) accept what the AODB and the samples send."""
    assert field_problem(name, value) is None


@pytest.mark.parametrize(("name", "value"), [
    ("SNDR", "A" * 17), ("SNDR", "AO DB"), ("SNDR", "A\x01"),
    ("SEQN", "0"), ("SEQN", "000000"), ("SEQN", "1234567"), ("SEQN", "12a"), ("SEQN", "１２３"),
    ("SEQN", "7" * 2700),
    ("TYPE", "FLOPX"), ("TYPE", "FL"), ("TYPE", "FL0P"), ("STYP", "GT01"), ("STYP", "ÄÖÜ"),
    ("DTTM", "2026113012000"), ("DTTM", "20261399250000"), ("DTTM", "20230229000000"), ("DTTM", "yesterday"),
    ("FLID", "1234567890123"), ("FLID", "12 34"), ("FLID", "-5"), ("FLID", "١٢٣"), ("FLID", "9" * 10240),
])
def test_broken_envelope_values_are_named_and_cut_short(name, value):
    """Item 5: each broken value is refused with a problem naming the field; a long one is quoted
    cut to 40 characters with its length, so the recorded detail stays small."""
    problem = field_problem(name, value)
    assert problem is not None and name in problem
    assert len(problem) < 200


def test_decode_refuses_a_broken_meta_or_flid_keeping_the_meta_for_the_ignore_rules():
    """Item 5: a broken META value or FLID is refused (a refusal never binds an identity); the META
    goes along, so an ignore rule still applies to an ignored type (US-04)."""
    with pytest.raises(SisRefused) as info:
        decode(envelope("ZZZZ", "NONE", "<ZZZZ/>\n", seqn="7" * 2700))
    assert info.value.reason == "malformed" and "SEQN" in info.value.detail
    assert info.value.meta is not None and info.value.meta.type_styp == "ZZZZ-NONE"
    with pytest.raises(SisRefused) as info:
        decode(gtdt("9" * 10240, (1, "A1")))
    assert info.value.reason == "malformed" and "FLID" in info.value.detail
    assert info.value.meta is not None and info.value.meta.styp == "GTDT"


def test_envelope_problem_judges_present_values_of_a_msg_root_only():
    """The HTTP door's check: a missing META or another root is left to the pump (US-02)."""
    assert envelope_problem(etree.fromstring("<NOTSIS/>")) is None
    assert envelope_problem(etree.fromstring("<MSG/>")) is None
    assert envelope_problem(etree.fromstring("<MSG><META><SEQN>1</SEQN></META></MSG>")) is None
    assert "SEQN" in envelope_problem(etree.fromstring("<MSG><META><SEQN>x</SEQN></META></MSG>"))
    assert "FLID" in envelope_problem(etree.fromstring("<MSG><FLOP><FLID>1 2</FLID></FLOP></MSG>"))


@pytest.mark.parametrize("declared", ["ISO-8859-1", "UTF-16", "GBK", "x-klingon", "EBCDIC-US"])
def test_the_encoding_declaration_is_ignored_for_text_and_for_utf8_bytes(declared):
    """Item 6, decisions F8: the text is characters; any declaration over it reads the same."""
    body = flop("REMC", "D1", "<REMC>航班延误 Café</REMC>").replace('encoding="UTF-8"', f'encoding="{declared}"')
    for given in (body, body.encode("utf-8")):
        assert decode(given).root.findtext("FLOP/REMC") == "航班延误 Café"


def test_undecodable_mailbox_bytes_are_refused_as_encoding_with_the_bytes_shown():
    """Item 4: the adapter keeps bytes that are not UTF-8 as lone surrogates (never failing the
    read); the decoder refuses them as malformed with an ``encoding:`` detail showing the bytes.
    Bytes handed over directly must be UTF-8 too."""
    raw = flop("REMC", "E1", "<REMC>a@@b</REMC>").encode().replace(b"@@", b"\xed\xa0\x80")
    text = body_text(raw)
    assert text is not None and "\udced" in text
    with pytest.raises(SisRefused) as info:
        decode(text)
    assert info.value.reason == "malformed" and info.value.detail.startswith("encoding:")
    assert "ed a0 80" in info.value.detail
    with pytest.raises(SisRefused) as info:
        decode(raw.replace(b"\xed\xa0\x80", b"\xe9"))
    assert info.value.reason == "malformed" and info.value.detail.startswith("encoding: invalid UTF-8")
    assert body_text("text") == "text" and body_text(None) is None


@pytest.mark.parametrize("ns", ["http://www.w3.org/2001/XInclude", "http://www.w3.org/2003/XInclude"])
def test_xinclude_is_refused_never_expanded(ns, tmp_path):
    """Decisions F9: an XInclude element is refused as forbidden in both namespaces libxml2 knows;
    the included file's content never appears."""
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    body = f'<MSG xmlns:xi="{ns}"><A><xi:include href="file://{secret}" parse="text"/></A></MSG>'
    with pytest.raises(SisRefused) as info:
        parse_xml(body)
    assert info.value.reason == "forbidden" and "TOP-SECRET" not in str(info.value)


def test_a_leading_byte_order_mark_is_dropped():
    """A UTF-8 BOM (as text U+FEFF or as bytes) does not change the message."""
    body = gtdt("B1", (1, "A1"))
    assert decode("\ufeff" + body).meta == decode(b"\xef\xbb\xbf" + body.encode()).meta == decode(body).meta


@pytest.mark.parametrize(("body", "detail"), [
    ("", "empty message"), (" ", "empty message"), ("\t\n\r\x0b\x0c ", "empty message"),
    ("\x00", "NUL byte in message"), (" \x00 ", "NUL byte in message"),
    ("\u00a0", "not well-formed"),                        # not ASCII whitespace: no empty message
    ('<!DOCTYPE MSG [<!ENTITY x "y">]><MSG/>', "DOCTYPE/ENTITY declarations are not accepted"),
    ("<! entity x>", "DOCTYPE/ENTITY declarations are not accepted"),
    ("<MSG>!</MSG>", "no META element"),                  # a '!' that starts no declaration
])
def test_the_byte_checks_refuse_before_any_parse(body, detail):
    """Security and bad input: the checks that need no parse (``_check_bytes``) give these
    classified refusals, the fast tests (``isspace``, one byte looked for) as the plain ones did."""
    with pytest.raises(SisRefused) as caught:
        decode(body)
    assert caught.value.detail.startswith(detail)
