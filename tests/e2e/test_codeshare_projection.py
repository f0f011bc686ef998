"""A code-share child's own change reaches its master's Redis entry (US-05 AC4, INV-24, decision C4):
the projection lists masters only, so the child's gate is visible to its readers through its master."""

from __future__ import annotations

import json
import uuid

from builders import gtdt
from snapshot_builders import dnld, fltr, sodt

from msgx_engine.delivery.projection import Projection, connect
from tests.pipeline_support import drain_now, proc

MASTER, CHILD = "9201", "9202"


def test_a_childs_gate_reaches_its_masters_projection(app, redis_url):
    """US-05 AC4, INV-24, decision C4: after a GTDT on the child, the master's projected whole
    state carries the gate at its new version, the child has no entry, and PG and Redis agree."""
    projection = Projection(connect(redis_url), f"flightInfo:test:{uuid.uuid4().hex[:8]}")
    app.post_commit.append(projection.hook)
    try:
        app.mailbox.put(dnld(fltr(MASTER, sodt(9)), fltr(CHILD, sodt(9), extra=f"<MAID>{MASTER}</MAID>")))
        drain_now(app)
        first = json.loads(projection.get(MASTER))
        assert "GTDT" not in first and projection.get(CHILD) is None
        changed = app.mailbox.put(gtdt(CHILD, (1, "C7")))
        drain_now(app)
        assert proc(app, changed).status == "SUCCEEDED"
        master = json.loads(projection.get(MASTER))
        assert master["GTDT"][0]["GATE"] == "C7"
        assert master["STATE_VERSION"] == first["STATE_VERSION"] + 1
        assert projection.get(CHILD) is None
        assert projection.drift(app.engine).total == 0
    finally:
        projection.client.delete(projection.key, projection.version_key)
