"""``schd`` in both shapes on the real Kafka-wire broker (tansu): D13, US-07 AC2, FS §8.

Default: one record per FLID per flush (key FLID, the newest whole state). ``MSGX_SCHD_FORMAT=array``
(the legacy consumers' shape): one JSON array per flush holding the same newest documents, key
``schd``; every covered event is marked sent either way."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace

import pytest
from builders import flop, gtdt
from sqlalchemy import select

from msgx_engine.app import App
from msgx_engine.config import ConfigError, Settings
from msgx_engine.delivery.dispatcher import ARRAY_KEY
from msgx_engine.delivery.runner import build_dispatcher
from msgx_engine.pipeline.pump import PumpOptions
from msgx_engine.state.serialize import state_json
from msgx_engine.store.flights import FlightRepository
from msgx_engine.store.tables import msg_event


def kafka_app(settings, clock, bootstrap: str, schd_format: str) -> App:
    tag = uuid.uuid4().hex[:8]
    return App.from_settings(replace(settings, kafka_bootstrap=bootstrap, topic_msg=f"msg_{tag}",
                                     topic_schd=f"schd_{tag}", schd_format=schd_format), clock=clock)


def process_and_dispatch(app: App, clock, *messages: str):
    for m in messages:
        app.mailbox.put(m)
    app.pump(PumpOptions(exit_when_waiting=True, idle_poll_s=0.01)).run()
    return build_dispatcher(app.settings, app.engine, clock=clock, delivery_timeout_s=10.0).run()


def latest_documents(app: App) -> dict[str, str]:
    with app.engine.connect() as conn:
        return {s.flid: state_json(s) for s in FlightRepository(conn).load_all_current()}


def all_schd_sent(app: App) -> bool:
    with app.engine.connect() as conn:
        return all(r.sent_at is not None for r in conn.execute(select(msg_event).where(msg_event.c.topic == "schd")))


MESSAGES = [gtdt(f, (1, f"A{i}")) for i in range(3) for f in ("S1", "S2")] + [
    gtdt("S3", (1, "A1")), flop("FDEL", "S3", "\t\t<FDEL></FDEL>\n")]


@pytest.mark.parametrize("schd_format", ["records", "array"])
def test_schd_shape_on_the_real_broker_d13(settings, clock, kafka_bootstrap, kafka_reader, schd_format):
    """D13, US-07 AC2, FS §8: one flush of S1 x3, S2 x3, S3 created then deleted. ``records``: three
    records keyed by FLID; ``array``: one record keyed ``schd`` whose value is the JSON array of the
    same three newest documents (S3 as its tombstone). All eight schd events are marked sent."""
    app = kafka_app(settings, clock, kafka_bootstrap, schd_format)
    try:
        summary = process_and_dispatch(app, clock, *MESSAGES)
        latest = latest_documents(app)
        tombstone = {"DELETED": True, "FLID": "S3", "STATE_VERSION": 2}
        expected = [json.loads(latest["S1"]), json.loads(latest["S2"]), tombstone]
        if schd_format == "array":
            (record,) = kafka_reader(app.settings.kafka_bootstrap, app.settings.topic_schd, 1)
            assert record.key == ARRAY_KEY
            assert json.loads(record.value) == expected
            assert record.headers["count"] == "3"
            assert summary.schd_records == 1
        else:
            records = kafka_reader(app.settings.kafka_bootstrap, app.settings.topic_schd, 3)
            assert sorted(r.key for r in records) == ["S1", "S2", "S3"]
            assert sorted((json.loads(r.value) for r in records), key=lambda d: d["FLID"]) == expected
            assert summary.schd_records == 3
        assert summary.schd_events == 8 and all_schd_sent(app)
    finally:
        app.dispose()


def test_schd_format_comes_from_the_environment_d13(monkeypatch):
    """MSGX_SCHD_FORMAT: unset -> records, ``array`` (any case) -> array, anything else refused."""
    monkeypatch.delenv("MSGX_DB_URL", raising=False)
    monkeypatch.delenv("MSGX_MAILBOX_URL", raising=False)
    monkeypatch.delenv("MSGX_SCHD_FORMAT", raising=False)
    assert Settings.from_env().schd_format == "records"
    monkeypatch.setenv("MSGX_SCHD_FORMAT", "ARRAY")
    assert Settings.from_env().schd_format == "array"
    monkeypatch.setenv("MSGX_SCHD_FORMAT", "list")
    with pytest.raises(ConfigError, match="MSGX_SCHD_FORMAT"):
        Settings.from_env()
