"""A shadow on production's Redis (OPS-3): every Redis path of the shadow (the post-commit write,
the drift check, archiving's removal and purge, the rebuild) acts on its own ``MSGX_REDIS_KEY``;
production's ``flightInfo`` hash stays byte-for-byte as it was. A private Redis server, so the
test may hold a real ``flightInfo``."""

from __future__ import annotations

import json
import os
from dataclasses import replace

from msgx_dagster.jobs.projection import projection_rebuild_job
from msgx_dagster.resources import MsgxResource
from msgx_engine.app import App
from msgx_engine.delivery.projection import Projection, connect
from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.pipeline.pump import PumpOptions
from tests.builders import gtdt

SHADOW_KEY = "shadow:flightInfo"


def test_a_shadow_writes_rebuilds_and_checks_only_its_own_hash(settings, clock, own_redis, monkeypatch):
    client = connect(own_redis.url)
    client.hset("flightInfo", mapping={"P1": '{"FLID":"P1","production":true}', "Z9": "{}"})
    client.hset("flightInfo:version", mapping={"P1": "99"})
    before = client.dump("flightInfo"), client.dump("flightInfo:version")

    producer = Mailbox(settings.mailbox_url or "")
    for message in (gtdt("P1", (1, "A1")), gtdt("P2", (1, "B1"))):
        producer.put(message)
    producer.dispose()
    shadow = App.from_settings(replace(settings, mode="shadow", redis_url=own_redis.url, redis_key=SHADOW_KEY),
                               clock=clock)
    try:
        shadow.pump(PumpOptions(exit_when_waiting=True, idle_poll_s=0.01)).run()
        assert sorted(client.hkeys(SHADOW_KEY)) == ["P1", "P2"]
        assert json.loads(client.hget(SHADOW_KEY, "P1"))["GTDT"][0]["GATE"] == "A1"
        drift = shadow.projection_drift()
        assert drift is not None and drift.total == 0, drift      # it looked at its own hash
        archiver = shadow.archiver()
        assert isinstance(archiver.projection, Projection) and archiver.projection.key == SHADOW_KEY
        client.hdel(SHADOW_KEY, "P2")
        for key in [k for k in os.environ if k.startswith("MSGX_")]:
            monkeypatch.delenv(key)
        for key, value in (("MSGX_DB_URL", settings.db_url), ("MSGX_MAILBOX_URL", settings.mailbox_url),
                           ("MSGX_HOME", str(settings.home)), ("MSGX_MODE", "shadow"),
                           ("MSGX_REDIS_URL", own_redis.url), ("MSGX_REDIS_KEY", SHADOW_KEY)):
            monkeypatch.setenv(key, value or "")
        run = projection_rebuild_job.execute_in_process(resources={"msgx": MsgxResource()})
        assert run.success
        assert sorted(client.hkeys(SHADOW_KEY)) == ["P1", "P2"]        # the rebuild filled its own hash
    finally:
        shadow.dispose()
    assert (client.dump("flightInfo"), client.dump("flightInfo:version")) == before
    client.close()
