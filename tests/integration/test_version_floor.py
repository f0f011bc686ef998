"""``version_floor.lift`` against a small reference model, on the real PostgreSQL (decision O19), and
the floor of a flight stored only elsewhere on both write paths (a message, a snapshot)."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from msgx_engine.store import version_floor
from msgx_engine.store.version_floor import Published
from tests.builders import gtdt
from tests.pipeline_support import drain_now
from tests.snapshot_builders import day_package

FLIDS = [f"V{i}" for i in range(6)]
WATERMARK = 100

flights = st.dictionaries(st.sampled_from(FLIDS), st.tuples(st.integers(1, 9), st.integers(0, 3)), max_size=6)
published = st.dictionaries(st.sampled_from(FLIDS), st.integers(1, 15), max_size=6)


def _store(conn, here: dict[str, tuple[int, int]]) -> None:
    """Each flight at its stored version, with ``pending`` unpublished events of rows after the
    watermark (the last ones up to the stored version) and one published event before it."""
    msg_id = WATERMARK
    for flid, (version, pending) in sorted(here.items()):
        conn.execute(text("INSERT INTO flight_schd (flid, state_version) VALUES (:f, :v)"), {"f": flid, "v": version})
        conn.execute(text("INSERT INTO msg_event (msg_id, flid, topic, kind, state_version, payload, sent_at) "
                          "VALUES (1, :f, 'msg', 'change', 1, '{}', now())"), {"f": flid})
        for v in range(version - min(pending, version) + 1, version + 1):
            msg_id += 1
            for topic in ("msg", "schd"):
                conn.execute(text("INSERT INTO msg_event (msg_id, flid, topic, kind, state_version, payload) "
                                  "VALUES (:m, :f, :t, 'state', :v, :p)"),
                             {"m": msg_id, "f": flid, "t": topic, "v": v,
                              "p": json.dumps({"FLID": flid, "STATE_VERSION": v, "X": topic}, sort_keys=True)})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(here=flights, there=published, there_event=st.integers(0, 500))
def test_o19_lift_puts_every_count_above_what_was_published(app, here, there, there_event):
    """O19: after ``lift`` (with events still to publish after the watermark) every stored flight's
    version is the larger of its own and the published one, shifted where its unpublished events
    started at or below the published version; those events keep their order and their gaps, their
    documents carry the new version, the first one lands one above the published version; every
    flight stored only elsewhere has its floor; the unpublished events' ids, and the next id, are
    above every id published or stored, in their old order."""
    with app.engine.connect() as conn, conn.begin() as tx:
        _store(conn, here)
        before_ids = conn.execute(text("SELECT coalesce(max(event_id), 0) FROM msg_event")).scalar_one()
        unpublished = conn.execute(text("SELECT event_id, flid, state_version FROM msg_event WHERE sent_at IS NULL "
                                        "ORDER BY event_id")).all()
        lifted = version_floor.lift(conn, Published(there_event, there), republish_after=WATERMARK)

        stored = dict(conn.execute(text("SELECT flid, state_version FROM flight_schd")).tuples().all())
        events = conn.execute(text("SELECT event_id, flid, state_version, payload FROM msg_event "
                                   "WHERE sent_at IS NULL ORDER BY event_id")).all()
        floors = dict(conn.execute(text("SELECT flid, state_version FROM version_floor")).tuples().all())
        next_id = conn.execute(text("SELECT nextval(pg_get_serial_sequence('msg_event', 'event_id'))")).scalar_one()
        tx.rollback()

    expected_versions = {}
    for flid, (version, _) in here.items():
        first = min((e.state_version for e in unpublished if e.flid == flid), default=None)
        shift = max(0, there.get(flid, 0) - (first - 1)) if first is not None else 0
        expected_versions[flid] = max(version + shift, there.get(flid, 0))
    assert stored == expected_versions
    assert floors == {f: v for f, v in there.items() if f not in here}
    assert [e.flid for e in events] == [e.flid for e in unpublished]               # same order, same events
    assert all(e.event_id > max(there_event, before_ids) for e in events)
    assert next_id > max([there_event, before_ids, *(e.event_id for e in events)])
    for flid in {e.flid for e in unpublished}:
        old = [e.state_version for e in unpublished if e.flid == flid]
        new = [e.state_version for e in events if e.flid == flid]
        assert [n - o for n, o in zip(new, old, strict=True)] == [new[0] - old[0]] * len(old)   # one shift each
        assert new[0] == max(old[0], there.get(flid, 0) + 1)
        assert new[-1] == stored[flid]
    assert all(json.loads(e.payload)["STATE_VERSION"] == e.state_version for e in events)
    assert lifted.renumbered == len(unpublished)


def test_o19_a_flight_stored_only_elsewhere_starts_above_its_floor(app):
    """O19: flights this database has never stored, with a floor from another installation, start
    one above it on the first write: by a flight message (GTDT) and by a day's snapshot; a flight
    without a floor starts at 1 as always."""
    with app.engine.begin() as conn:
        version_floor.lift(conn, Published(0, {"FL1": 7, "FL2": 4}))
    app.mailbox.put(gtdt("FL1", (1, "A1")))
    app.mailbox.put(day_package(["FL2", "FL3"], day=9))
    drain_now(app)
    with app.engine.connect() as conn:
        versions = dict(conn.execute(text("SELECT flid, state_version FROM flight_schd")).tuples().all())
        published_versions = dict(conn.execute(text(
            "SELECT flid, max(state_version) FROM msg_event GROUP BY flid")).tuples().all())
    assert versions == {"FL1": 8, "FL2": 5, "FL3": 1}
    assert published_versions == versions
