"""The airbridges reach the Redis projection, also when only the ABDG data changed (US-14, D27,
INV-23, D10): the re-derived flights are projected by the ABDG message's post-commit step."""

from __future__ import annotations

import json
import uuid

from builders import envelope, flop
from snapshot_builders import pump, status

from msgx_engine.delivery.projection import Projection, connect


def test_projection_follows_an_abdg_change_d27(app, redis_url):
    projection = Projection(connect(redis_url), f"flightInfo:test:{uuid.uuid4().hex[:8]}")
    app.post_commit.append(projection.hook)
    load = envelope("ABDG", "DNLD", "\t<RECS>1</RECS>\n\t<ABDG><ABCD>A1</ABCD><STND>501</STND></ABDG>\n")
    move = envelope("ABDG", "UPD", "\t<RECS>1</RECS>\n\t<ABDG><ABCD>A1</ABCD><STND>502</STND></ABDG>\n")
    try:
        pump(app, load, flop("STND", "F1", "\t\t<STND>501</STND>\n"))
        assert json.loads(projection.get("F1"))["STND_ABDG"] == ["A1"]
        (m,) = pump(app, move)
        assert status(app, m) == ("SUCCEEDED", None)
        doc = json.loads(projection.get("F1"))
        assert (doc["STND_ABDG"], doc["STATE_VERSION"]) == ([], 2)
        assert projection.drift(app.engine).total == 0
    finally:
        projection.client.delete(projection.key, projection.version_key)
