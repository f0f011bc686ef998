"""P20 (snapshot speed): the pump processes a large message (a body of 1 MB or more, a
daily schedule of ~1,000 flights and up) with the cyclic garbage collector paused, and resumes it
when the message is done, however it ends (SUCCEEDED, DEAD); a small message runs with it as it
was, and a collector someone else turned off stays off. P26: the objects of start-up are frozen out
of collections by the first pump. Real pump, PostgreSQL and MariaDB."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from builders import gtdt
from snapshot_builders import pump, status
from test_large_body_hash import package

from msgx_engine.pipeline.large_bodies import gc_pause


@pytest.fixture
def collector_seen(app) -> Iterator[list[bool]]:
    """Whether the collector ran while each message's post-commit step ran (inside its processing)."""
    seen: list[bool] = []
    app.post_commit.append(lambda _conn, _msg_id, _states: seen.append(gc.isenabled()))
    yield seen
    gc.enable()


def test_p20_large_message_runs_with_the_collector_paused_then_resumed(app, collector_seen):
    assert gc.isenabled()
    (small,) = pump(app, gtdt("G1", (1, "A1")))
    (large,) = pump(app, package("20260908220000"))
    assert status(app, small)[0] == status(app, large)[0] == "SUCCEEDED"
    assert collector_seen == [True, False], "paused for the package only"
    assert gc.isenabled() and not gc_pause.paused()


def test_p20_collector_resumed_after_a_large_body_that_is_refused(app):
    (bad,) = pump(app, "<MSG>" + "x" * gc_pause.LARGE_BODY_CHARS + "</MSG")
    assert status(app, bad)[0] == "DEAD"
    assert gc.isenabled() and not gc_pause.paused()


def test_p20_a_collector_turned_off_elsewhere_stays_off():
    gc.disable()
    try:
        gc_pause.pause_for(gc_pause.LARGE_BODY_CHARS)
        assert not gc_pause.paused()
        gc_pause.resume()
        assert not gc.isenabled()
    finally:
        gc.enable()
    gc_pause.pause_for(gc_pause.LARGE_BODY_CHARS - 1)
    assert gc.isenabled() and not gc_pause.paused()
    gc_pause.pause_for(gc_pause.LARGE_BODY_CHARS)
    assert not gc.isenabled() and gc_pause.paused()
    gc_pause.resume()
    assert gc.isenabled() and not gc_pause.paused()


def test_p26_first_pump_leaves_start_up_objects_out_of_collections_once(app):
    """P26: what the process holds when its first pump starts is frozen (``gc.freeze``), so the
    oldest generation's collections no longer walk the modules and the engine; a later pump (which
    finds thousands of objects made since) freezes nothing more."""
    pump(app, gtdt("G1", (1, "A1")))
    frozen = gc.get_freeze_count()
    assert frozen > 0
    pump(app, gtdt("G2", (1, "A2")))
    assert gc.get_freeze_count() == frozen


def test_p30_large_message_objects_freed_after_its_commit_not_before(app):
    """P30 (snapshot): a large message's objects (its decoded tree, decision and written
    states) are still held while its commit and post-commit steps run, so freeing them does not
    delay its terminal commit; they are freed once it is done. A small message holds nothing."""
    held: list[int] = []
    app.post_commit.append(lambda _conn, _msg_id, _states: held.append(gc_pause.holding()))
    (small,) = pump(app, gtdt("G1", (1, "A1")))
    (large,) = pump(app, package("20260908220000"))
    assert status(app, small)[0] == status(app, large)[0] == "SUCCEEDED"
    assert held[0] == 0 and held[1] > 0, held
    assert gc_pause.holding() == 0


def test_p30_a_small_message_after_a_large_one_holds_nothing():
    """P30: holding is for large messages only; a small one that follows a large one (in the same
    open group) leaves its objects to be freed at once, while the large one's stay held."""
    try:
        gc_pause.pause_for(gc_pause.LARGE_BODY_CHARS)
        gc_pause.hold(object())
        gc_pause.pause_for(gc_pause.LARGE_BODY_CHARS - 1)
        gc_pause.hold(object(), object())
        assert gc_pause.holding() == 1
    finally:
        gc_pause.resume()
    assert gc_pause.holding() == 0 and gc.isenabled()
