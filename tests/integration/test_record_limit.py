"""A message whose events would exceed the Kafka record limit is refused at processing time
(DEAD(oversize) before transaction 1 commits, nothing written, the queue
moves on; on the dynamic path and on the snapshot (plan) path."""

from __future__ import annotations

from dataclasses import replace

import pytest
from snapshot_builders import dnld, fltr, sodt

from msgx_engine.app import App
from msgx_engine.config import KAFKA_MAX_RECORD_BYTES
from msgx_engine.store import bulk
from tests.builders import gtdt
from tests.pipeline_support import drain_now, events, flight_count, gates, is_marked, proc

SMALL_LIMIT = 2048   # one flight with a gate or two fits; forty gates (about 2.7 KB of state) do not


def small_limit_app(settings, clock) -> App:
    return App.from_settings(replace(settings, kafka_max_record_bytes=SMALL_LIMIT), clock=clock)


def many_gates(flid: str, n: int = 40) -> str:
    return gtdt(flid, *[(i, f"GATE{i:02d}") for i in range(1, n + 1)])


def assert_dead_oversize(app: App, msg_id: int) -> None:
    row = proc(app, msg_id)
    assert (row.status, row.reason, row.error_class, row.attempts) == ("DEAD", "oversize", "MALFORMED", 0)
    assert "Kafka record limit" in row.error_detail and "MSGX_KAFKA_MAX_RECORD_BYTES" in row.error_detail
    assert events(app, msg_id) == [] and is_marked(app, msg_id)


def test_new_flight_over_the_record_limit_is_dead_and_writes_nothing(settings, clock):
    """Item 8(b): a message creating a flight whose whole state would pass MSGX_KAFKA_MAX_RECORD_BYTES
    ends DEAD(oversize) at once (no retry), no flight row, no event; the next message for the same
    flight is processed as if the refused one never came."""
    app = small_limit_app(settings, clock)
    try:
        big = app.mailbox.put(many_gates("R1"))
        small = app.mailbox.put(gtdt("R1", (1, "A1")))
        drain_now(app)
        assert_dead_oversize(app, big)
        assert proc(app, small).status == "SUCCEEDED"
        assert gates(app, "R1") == [(1, "A1")]
        assert [(e.topic, e.state_version) for e in events(app, small)] == [("msg", 1), ("schd", 1)]
    finally:
        app.dispose()


def test_update_over_the_record_limit_leaves_the_flight_as_it_was(settings, clock):
    """Item 8(b), INV-17b: an update that would push an existing flight over the limit is rolled
    back whole (gates, version, events untouched); the queue behind it proceeds."""
    app = small_limit_app(settings, clock)
    try:
        first = app.mailbox.put(gtdt("R2", (1, "A1")))
        big = app.mailbox.put(many_gates("R2"))
        other = app.mailbox.put(gtdt("R3", (1, "B1")))
        last = app.mailbox.put(gtdt("R2", (1, "C1")))
        drain_now(app)
        assert [proc(app, m).status for m in (first, other, last)] == ["SUCCEEDED"] * 3
        assert_dead_oversize(app, big)
        assert gates(app, "R2") == [(1, "C1")] and gates(app, "R3") == [(1, "B1")]
        assert [e.state_version for e in events(app, last)] == [2, 2]      # the refused one took no version
    finally:
        app.dispose()


@pytest.mark.parametrize("flights", [2, bulk.COPY_MIN_ROWS + 100], ids=["statement", "copy"])
def test_snapshot_with_a_flight_over_the_record_limit_is_dead_and_writes_nothing(settings, clock, flights):
    """Item 8(b) on the plan path (snapshot writers): one flight of the package over the limit rolls
    the whole package back, DEAD(oversize); a valid package after it applies. With ``copy``, the
    events go by COPY and are checked as they are built and written (P29): the last one aborts the
    COPY after the others were sent, and the rollback still leaves nothing."""
    app = small_limit_app(settings, clock)
    try:
        others = [fltr(f"S{i:04d}", sodt(9)) for i in range(1, flights)]
        big = app.mailbox.put(dnld(*others, fltr("S9999", sodt(9), gates=20)))
        good = app.mailbox.put(dnld(*others, fltr("S9999", sodt(9))))
        drain_now(app)
        assert_dead_oversize(app, big)
        assert "flight S9999" in proc(app, big).error_detail
        assert proc(app, good).status == "SUCCEEDED"
        assert flight_count(app) == flights
        assert len(events(app, good)) == flights
    finally:
        app.dispose()


def test_snapshot_whose_outside_master_event_is_over_the_limit_is_dead(settings, clock):
    """Item 8(b) for a message with flight events and plans (D30): the package's child names a
    stored master outside the package, whose MAFL change makes that master's events too large.
    Those events are checked once, as transaction 1 writes them after the plans, and the rollback
    leaves nothing: no child, no MAFL on the master, no event; DEAD(oversize) naming the master."""
    roomy = App.from_settings(settings, clock=clock)      # the default limit takes the master's 40 gates
    try:
        master = roomy.mailbox.put(many_gates("BM01"))
        drain_now(roomy)
        assert proc(roomy, master).status == "SUCCEEDED"
    finally:
        roomy.dispose()
    app = small_limit_app(settings, clock)
    try:
        package = app.mailbox.put(dnld(fltr("BC01", sodt(9), extra="<MAID>BM01</MAID>")))
        drain_now(app)
        assert_dead_oversize(app, package)
        assert "flight BM01" in proc(app, package).error_detail
        assert flight_count(app) == 1 and len(gates(app, "BM01")) == 40
    finally:
        app.dispose()


def test_default_limit_refuses_a_megabyte_state(app):
    """Item 8(b) at the default limit (900,000 bytes, under the broker's 1 MB message.max.bytes): a
    gate code of a million characters would make a record no broker takes: DEAD(oversize)."""
    assert app.settings.kafka_max_record_bytes == KAFKA_MAX_RECORD_BYTES == 900_000
    huge = app.mailbox.put(gtdt("R4", (1, "G" * 1_000_000)))
    after = app.mailbox.put(gtdt("R4", (1, "A1")))
    drain_now(app)
    assert_dead_oversize(app, huge)
    assert proc(app, after).status == "SUCCEEDED" and gates(app, "R4") == [(1, "A1")]
