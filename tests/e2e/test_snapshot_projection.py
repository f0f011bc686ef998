"""A snapshot's written and deleted flights reach the Redis projection (INV-23, D2, D10)."""

from __future__ import annotations

import json

from snapshot_builders import (
    day_package,
    pump,
    status,
)


def test_projection_follows_the_snapshot(app, redis_url):
    """INV-15b, D10, INV-31: with the Redis projection wired as the post-commit step, a snapshot's
    flights appear with their whole state and its diff-deleted flights are removed; no drift."""
    import uuid

    from msgx_engine.delivery.projection import Projection, connect

    projection = Projection(connect(redis_url), f"flightInfo:test:{uuid.uuid4().hex[:8]}")
    app.post_commit.append(projection.hook)
    try:
        pump(app, day_package(["A", "B"], 9))
        assert projection.get("A") is not None and projection.get("B") is not None
        (m,) = pump(app, day_package(["A"], 9))
        assert status(app, m) == ("SUCCEEDED", None)
        assert projection.get("B") is None
        assert json.loads(projection.get("A"))["STATE_VERSION"] == 2
        assert projection.drift(app.engine).total == 0
    finally:
        projection.client.delete(projection.key, projection.version_key)
