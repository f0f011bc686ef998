"""SIS decoding over the whole public sample corpus (US-03 AC2)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from msgx_engine.sis.content_hash import content_hash, same_content
from msgx_engine.sis.decode import SisRefused, decode, parse_xml


def _index(samples):
    with open(samples / "INDEX.tsv", encoding="utf-8") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def test_every_sample_decodes_or_is_refused_with_a_reason(samples):
    """All 172 samples: well-formed ones decode to (META, kind, body) matching INDEX.tsv; the one
    with two </MSG> tags (ABNR/03_ADD.xml) is refused as malformed."""
    rows = _index(samples)
    assert len(rows) == 172
    refused = {}
    kinds = {}
    for row in rows:
        data = (samples / row["file"]).read_bytes()
        try:
            msg = decode(data)
        except SisRefused as exc:
            refused[row["file"]] = exc.reason
            continue
        assert row["well_formed"] == "yes", row["file"]
        assert (msg.meta.type, msg.meta.styp, msg.meta.seqn) == (row["TYPE"], row["STYP"], row["SEQN"])
        assert msg.meta.dttm == row["DTTM"]
        kinds[msg.kind] = kinds.get(msg.kind, 0) + 1
    assert refused == {"ABNR/03_ADD.xml": "malformed"}
    assert kinds == {"FLOP": 71, "REF": 97, "SCHD": 1, "SCHS": 2}


def test_identity_and_content_hash_follow_the_samples_notes(samples):
    """INV-9 inputs: APPT/01 and APPT/02 share AODB|FLOP|APPT|1243 with different content; ABDG/02
    and SCHD/02 share an identity with identical text."""
    a1 = decode((samples / "APPT/01_APPT.xml").read_bytes())
    a2 = decode((samples / "APPT/02_APPT.xml").read_bytes())
    assert a1.meta.identity == a2.meta.identity == "AODB|FLOP|APPT|1243"
    assert a1.payload_hash != a2.payload_hash
    r1 = decode((samples / "ABDG/02_RESP.xml").read_bytes())
    r2 = decode((samples / "SCHD/02_RESP.xml").read_bytes())
    assert r1.meta.identity == r2.meta.identity and r1.payload_hash == r2.payload_hash


def test_hash_ignores_formatting_and_dttm_but_not_content():
    base = "<MSG><META><SNDR>A</SNDR><SEQN>1</SEQN><DTTM>{d}</DTTM><TYPE>FLOP</TYPE><STYP>GTDT</STYP></META>" \
           "<FLOP><FLID>1</FLID><GTDT GTNO{sp}=\"1\"><GATE>{g}</GATE></GTDT></FLOP></MSG>"
    h1 = decode(base.format(d="20200101000000", sp="", g="A1")).payload_hash
    h2 = decode(base.format(d="20211231235959", sp=" ", g="A1").replace("<FLOP>", "<FLOP>\n\t")).payload_hash
    h3 = decode(base.format(d="20200101000000", sp="", g="A2")).payload_hash
    assert h1 == h2 != h3


@pytest.mark.parametrize("text,reason", [
    ("", "malformed"),
    ("<MSG><META>", "malformed"),
    ('<?xml version="1.0"?><!DOCTYPE MSG [<!ENTITY x SYSTEM "file:///etc/passwd">]><MSG>&x;</MSG>', "forbidden"),
    ('<!DOCTYPE a [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;&a;">]><a>&b;</a>', "forbidden"),
    ("<MSG>\x00</MSG>", "malformed"),
    ("<NOTMSG/>", "malformed"),
    ("<MSG><META><SNDR>A</SNDR><SEQN>1</SEQN><DTTM>1</DTTM><TYPE>FLOP</TYPE></META></MSG>", "malformed"),
    ("<MSG><META><SNDR>A</SNDR><SEQN>1</SEQN><DTTM>1</DTTM><TYPE>FLOP</TYPE><STYP>GTDT</STYP></META></MSG>",
     "malformed"),
    ("<MSG><META><SNDR>A</SNDR><SEQN>1</SEQN><DTTM>1</DTTM><TYPE>FLOP</TYPE><STYP>GTDT</STYP></META>"
     "<FLOP><FFID>x</FFID></FLOP></MSG>", "malformed"),
])
def test_bad_input_is_refused_with_a_classified_reason(text, reason):
    """Security and robustness: no DTD/entities, NUL bytes, missing META fields, no FLID."""
    with pytest.raises(SisRefused) as info:
        decode(text)
    assert info.value.reason == reason


def test_size_and_depth_limits():
    big = "<MSG>" + "x" * 200 + "</MSG>"
    with pytest.raises(SisRefused) as info:
        parse_xml(big, max_bytes=100)
    assert info.value.reason == "oversize"
    deep = "<a>" * 40 + "</a>" * 40
    with pytest.raises(SisRefused) as info:
        parse_xml(deep)
    assert info.value.reason == "malformed" and "deeper" in info.value.detail


def test_depth_limit_is_exact():
    """Nesting of exactly the limit parses,
    one level more is refused as malformed."""
    assert parse_xml("<a>" * 16 + "</a>" * 16, max_depth=16).tag == "a"
    with pytest.raises(SisRefused) as info:
        parse_xml("<a>" * 17 + "</a>" * 17, max_depth=16)
    assert info.value.reason == "malformed" and "deeper than 16" in info.value.detail


@pytest.mark.parametrize("sample, first, second", [
    ("SCHD/01_DNLD.xml", "5bec1496812884ac8d22839ea5b171424f18914f954b093c5f0c163a69fba2b5",
     "c2:41c4eb0cb37f1730f5d5c9c7a70d6aa22e575bb556ac019acbf2ec446528e9b3"),
    ("SCHS/01_DNLD.xml", "fc24d51356a59dbb787d6f8be0555c0d77e38f025e2701770a9ef80939464a7d",
     "c2:b3832f4ac47148d29089b46e3aa8a912446a8967737c72963c825e5d70ed0d4b"),
    ("SCHS/02_RESP.xml", "3cf380b6e76d956b8720696deea606bf678bf11ca879b1855ac50cd3dc6b1dc0",
     "c2:5526c35929cedef05f4e70ebda5f2026db2e703360b1bb1c6bdc00dc5d298a44"),
])
def test_inv9_payload_hash_is_stable_across_versions(sample, first, second):
    """INV-9, US-03 AC3: stored payload hashes are compared with new ones (duplicate vs identity
    conflict), so both kinds stay the values they were first given: the first kind (bindings made
    before P28; its walk was rewritten for speed, these digests were computed before the
    rewrite), which ordinary bodies are still bound with, and the second, which bodies of 1 MB or
    more are bound with since P28."""
    body = (Path(__file__).resolve().parent.parent / "data" / "sis-samples" / sample).read_bytes()
    msg = decode(body)
    assert msg.payload_hash == first, "a body under 1 MB is bound with the first kind"
    assert content_hash(msg.root) == second
    assert same_content(first, msg.payload_hash, msg.root) and same_content(second, msg.payload_hash, msg.root)
