"""A large body's tree checks (depth, XInclude) made by the offload helper (decision P32) keep
every outcome the decoder gave on its own, through the real pump: a refused package ends DEAD
with the decoder's reason and detail, never bound (INV-9), with no business effect (INV-30) and
its mailbox row marked once (US-02); the refusal comes before a handler's own verdict and before
an ignore rule (US-04), as in place; a package that passes is written as before, without the
pump walking its tree for those checks."""

from __future__ import annotations

from dataclasses import replace

import pytest
from snapshot_builders import big_package, flights, pump

from msgx_engine.app import App
from msgx_engine.pipeline.large_bodies import offload
from msgx_engine.sis import decode as decode_module
from msgx_engine.sis.decode import MAX_DEPTH
from tests.pipeline_support import assert_no_effect, drain_now, is_marked, proc

XI = "http://www.w3.org/2001/XInclude"
DEEP = "<D>" * MAX_DEPTH + "x" + "</D>" * MAX_DEPTH


def large(extra: str = "", n: int = 1200, recs: int | None = None) -> str:
    body = big_package(n).replace("</FLTR>", extra + "</FLTR>", 1)
    if recs is not None:
        body = body.replace(f"<RECS>{n}</RECS>", f"<RECS>{recs}</RECS>")
    assert len(body.encode()) >= offload.OFFLOAD_BYTES
    return body


def assert_refused(app, msg_id: int, reason: str, detail: str) -> None:
    row = proc(app, msg_id)
    assert (row.status, row.reason, row.error_class, row.error_detail) == ("DEAD", reason, "MALFORMED", detail)
    assert row.identity_key is None, "a refusal is never bound"
    assert_no_effect(app, msg_id)
    assert is_marked(app, msg_id)


@pytest.mark.parametrize(("extra", "reason", "detail"), [
    (DEEP, "malformed", f"nesting deeper than {MAX_DEPTH}"),
    (f'<xi:include xmlns:xi="{XI}" href="/etc/passwd"/>', "forbidden",
     "XInclude elements are not accepted (never expanded)"),
], ids=["too-deep", "xinclude"])
def test_p32_a_large_package_the_helper_refuses_ends_dead_with_nothing_written(app, extra, reason, detail) -> None:
    offload.shutdown()
    (m,) = pump(app, large(extra))
    assert offload._worker is not None, "the package went to the helper"
    assert_refused(app, m, reason, detail)
    assert flights(app) == {}


def test_p32_the_refusal_comes_before_the_handlers_own_verdict(app) -> None:
    """RECS disagreeing with the records is the snapshot handler's DEAD(malformed) with its own
    detail; with a tree too deep as well, the depth is what the decoder named first."""
    (m,) = pump(app, large(DEEP, recs=1199))
    assert_refused(app, m, "malformed", f"nesting deeper than {MAX_DEPTH}")


def test_p32_a_tree_too_deep_is_refused_even_when_its_type_is_ignored(settings, clock) -> None:
    """US-04 skips an ignored type whatever its body looks like, once its META is read; the tree
    checks come before META, so such a body was DEAD before the helper took them and stays so."""
    app = App.from_settings(replace(settings, ignore_rules=("schd-dnld",)), clock=clock)
    try:
        refused, ignored = app.mailbox.put(large(DEEP)), app.mailbox.put(large())
        drain_now(app)
        assert_refused(app, refused, "malformed", f"nesting deeper than {MAX_DEPTH}")
        assert (proc(app, ignored).status, proc(app, ignored).reason) == ("SKIPPED", "ignored:schd-dnld")
    finally:
        app.dispose()


def test_p32_a_package_that_passes_is_written_without_the_pump_walking_its_tree(app, monkeypatch) -> None:
    walks: list[int] = []
    too_deep = decode_module._too_deep
    monkeypatch.setattr(decode_module, "_too_deep", lambda root, limit: walks.append(limit) or too_deep(root, limit))
    (m,) = pump(app, large())
    assert (proc(app, m).status, len(flights(app))) == ("SUCCEEDED", 1200)
    assert walks == [], "the helper made the depth check, not the pump"
