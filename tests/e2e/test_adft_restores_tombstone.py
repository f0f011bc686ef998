"""An ADFT that restores a flight whose only record is an FDEL tombstone is a visible change
(INV-29, INV-13; decision L3): real pump, PostgreSQL, MariaDB and the Redis projection."""

from __future__ import annotations

import json
import uuid

from builders import flop
from snapshot_builders import events, fltr, pump, query, schd, status

from msgx_engine.delivery.projection import Projection, connect


def test_adft_after_fdel_of_a_never_stored_flight_is_announced(app, redis_url):
    """FDEL of a FLID never stored leaves a silent tombstone (version 0, no event, nothing
    projected). The ADFT that then restores it bumps the version to 1 and writes the ``msg``
    change and the ``schd`` whole state in its transaction, and the projection shows the flight:
    consumers learn of it now, not at its next change (before: live at version 0, no event, no
    Redis entry)."""
    projection = Projection(connect(redis_url), f"flightInfo:test:{uuid.uuid4().hex[:8]}")
    app.post_commit.append(projection.hook)
    try:
        (fdel,) = pump(app, flop("FDEL", "X1", "\t\t<FDEL></FDEL>\n"))
        assert status(app, fdel) == ("SUCCEEDED", None)
        assert query(app, "SELECT deleted, state_version FROM flight_schd WHERE flid = 'X1'") == [(True, 0)]
        assert events(app, fdel) == [] and projection.get("X1") is None

        (adft,) = pump(app, schd("ADFT", fltr("X1", stnd="504")))
        assert status(app, adft) == ("SUCCEEDED", None)
        assert query(app, "SELECT deleted, state_version, last_message_id FROM flight_schd WHERE flid = 'X1'") == [
            (False, 1, adft)]
        assert [(f, topic, kind) for f, topic, kind, _ in events(app, adft)] == [("X1", "msg", "change"),
                                                                                   ("X1", "schd", "state")]
        ((change,),) = query(app, "SELECT payload FROM msg_event WHERE msg_id = :m AND topic = 'msg'", m=adft)
        assert json.loads(change)["CHANGES"]["STND"] == "504"
        doc = json.loads(projection.get("X1"))
        assert (doc["FLID"], doc["STATE_VERSION"], doc["STND"]) == ("X1", 1, "504")
        assert projection.drift(app.engine).total == 0
    finally:
        projection.client.delete(projection.key, projection.version_key)
