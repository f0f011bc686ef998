"""Events of a folded message are written released (decision P25, P8, INV-17b).

With no post-commit step, transaction 2 commits with transaction 1 (P8): the events are then
written with ``released_at`` set, instead of being written unreleased and rewritten by the
terminal status statement in the same commit (for a snapshot, 10,000 rows written twice). With two
transactions (a post-commit step, or ``MSGX_SPLIT_TRANSACTIONS``) the events stay unreleased until
transaction 2. A test-only trigger records every UPDATE of ``msg_event``; the outcome is the same
either way: every event is released when its message is terminal, and only then.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from snapshot_builders import big_package, pump, query

from msgx_engine.app import App
from tests.builders import gtdt

NOTE_UPDATES = """
CREATE TABLE event_updates (event_id bigint NOT NULL);
CREATE FUNCTION note_event_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO event_updates VALUES (OLD.event_id); RETURN NEW; END $$;
CREATE TRIGGER note_event_update BEFORE UPDATE ON msg_event FOR EACH ROW EXECUTE FUNCTION note_event_update();
"""


@pytest.fixture(params=["folded", "split"])
def pump_app(request, settings, clock):
    app = App.from_settings(replace(settings, split_transactions=request.param == "split"), clock=clock)
    with app.engine.begin() as conn:
        conn.exec_driver_sql(NOTE_UPDATES)
    yield app, request.param
    app.dispose()


def test_p25_folded_events_are_written_released_split_ones_released_by_transaction_2(pump_app) -> None:
    """A 600-flight DNLD (600 ``schd`` events by COPY) and a GTDT (2 events by the JSON insert):
    folded, no event row is ever updated and each is released at its message's applied time;
    split, each is released by one UPDATE in transaction 2. Both end SUCCEEDED, all released."""
    app, mode = pump_app
    snapshot, change = pump(app, big_package(600, gates=1, desks=0, routes=0, stands=0), gtdt("F000001", (1, "Z9")))
    for msg_id, count in ((snapshot, 600), (change, 2)):
        rows = query(app, "SELECT e.released_at = p.applied_at, e.released_at IS NOT NULL, p.status FROM msg_event e "
                          "JOIN proc_state p USING (msg_id) WHERE msg_id = :m", m=msg_id)
        assert len(rows) == count
        assert {(released, status) for _, released, status in rows} == {(True, "SUCCEEDED")}
        if mode == "folded":
            assert all(at_applied for at_applied, _, _ in rows)
    updated = query(app, "SELECT count(*), count(DISTINCT event_id) FROM event_updates")[0]
    assert updated == ((0, 0) if mode == "folded" else (602, 602))
