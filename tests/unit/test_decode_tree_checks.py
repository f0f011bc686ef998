"""A large body's tree checks, its depth and any XInclude element, are made by the offload helper
(decision P32) and refuse exactly what the decoder refuses on its own (security: bodies are
bounded, XInclude never expanded; bad input gets the same classified outcome): the same reason,
the same detail, in the decoder's order, whether the helper answers, answers nothing, or the
refusal is taken in place. The pump's side (nothing of a refused body commits) is in
``tests/integration/test_pump_tree_checks.py``."""

from __future__ import annotations

import pytest
from snapshot_builders import big_package

from msgx_engine.pipeline.large_bodies import offload
from msgx_engine.sis.decode import MAX_DEPTH, SisRefused, decode

pytestmark = pytest.mark.usefixtures("fresh_offload_worker")

XI = "http://www.w3.org/2001/XInclude"


def nested(levels: int) -> str:
    return "<D>" * levels + "x" + "</D>" * levels


def large(extra: str = "", *, root: str = "MSG") -> str:
    """A package over the offload threshold with ``extra`` inside its first flight record."""
    body = big_package(1200).replace("</FLTR>", extra + "</FLTR>", 1)
    if root != "MSG":
        body = body.replace("<MSG>", f"<{root}>", 1).replace("</MSG>", f"</{root}>")
    assert len(body.encode()) >= offload.OFFLOAD_BYTES
    return body


TOO_DEEP = large(nested(MAX_DEPTH))       # MSG/SCHD/FLTR are three levels already
XINCLUDE = large(f'<xi:include xmlns:xi="{XI}" href="/etc/passwd"/>')


def refusal_in_place(body: str) -> SisRefused:
    with pytest.raises(SisRefused) as caught:
        decode(body)
    return caught.value


@pytest.mark.parametrize("body", [TOO_DEEP, XINCLUDE], ids=["too-deep", "xinclude"])
def test_p32_the_helper_refuses_what_decode_refuses_in_place(body: str) -> None:
    expected = refusal_in_place(body)
    msg = decode(body, hasher=offload.submit)            # decoded: the helper took the checks
    assert isinstance(msg, offload.HandedOver) and not msg.pending._checked
    refused = msg.refusal()
    assert refused is not None
    assert (refused.reason, refused.detail) == (expected.reason, expected.detail)
    assert msg.refusal(here=True) is not None, "made in place: the same verdict"


def test_p32_a_body_that_passes_is_checked_once() -> None:
    msg = decode(large(nested(MAX_DEPTH - 4)), hasher=offload.submit)      # 3 + 12 + 1 = 16 levels: allowed
    assert isinstance(msg, offload.HandedOver) and not msg.pending._checked
    assert msg.refusal() is None and msg.pending._checked
    assert msg.refusal(here=True) is None


def test_p32_a_helper_without_an_answer_means_the_checks_are_made_in_place() -> None:
    msg = decode(TOO_DEEP, hasher=offload.submit)
    assert offload._worker is not None
    offload._worker.kill()
    offload._worker.wait()
    refused = msg.refusal()
    assert refused is not None and refused.detail == f"nesting deeper than {MAX_DEPTH}"


def test_p32_the_tree_checks_keep_their_place_before_the_envelope_checks() -> None:
    """A body that is too deep and has the wrong root is refused for its depth, as in place."""
    body = large(nested(MAX_DEPTH), root="NOTMSG")
    expected = refusal_in_place(body)
    assert expected.detail == f"nesting deeper than {MAX_DEPTH}"
    with pytest.raises(SisRefused) as caught:
        decode(body, hasher=offload.submit)
    assert (caught.value.reason, caught.value.detail, caught.value.meta) == (expected.reason, expected.detail, None)


def test_p32_small_bodies_and_the_decoder_alone_check_in_place() -> None:
    """Only a body the helper took leaves its checks to it: a small one, or one decoded without a
    hasher (the HTTP door, replay), is refused by ``decode`` itself."""
    small = big_package(3).replace("</FLTR>", nested(MAX_DEPTH) + "</FLTR>", 1)
    with pytest.raises(SisRefused, match="nesting deeper"):
        decode(small, hasher=offload.submit)
    with pytest.raises(SisRefused, match="nesting deeper"):
        decode(TOO_DEEP)


@pytest.mark.parametrize("uri", [XI, "http://www.w3.org/2003/XInclude", "http://www.w3.org/2001/X&#73;nclude",
                                 "&#104;ttp://www.w3.org/2001/XInclude", "http://www.w3.org/2001/&#x58;Include"])
def test_an_xinclude_namespace_however_spelled_is_refused(uri: str) -> None:
    """Security (F9): the walk for XInclude elements is skipped only for bytes that cannot declare
    their namespace (``_may_include``); a URI written with character references still is one."""
    body = big_package(3).replace("</FLTR>", f'<i:include xmlns:i="{uri}" href="/etc/passwd"/></FLTR>', 1)
    with pytest.raises(SisRefused, match="XInclude"):
        decode(body)


def test_bytes_that_cannot_declare_xinclude_skip_its_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    from msgx_engine.sis import decode as decode_module

    walks: list[object] = []
    monkeypatch.setattr(decode_module, "_xinclude", lambda root: walks.append(root))
    decode(big_package(3))
    assert walks == []
    decode(big_package(3).replace("</FLTR>", "<REMK>&#65;</REMK></FLTR>", 1))
    assert len(walks) == 1, "a character reference could spell the namespace: walked"
