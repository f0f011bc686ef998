"""Outbox events made DEAD for real, for the tests of the operator's paths: one dispatcher pass
sends them to a topic that cannot exist (the broker refuses its name, TOPIC_EXCEPTION) with one
attempt allowed, so the dispatcher's own failure path dead-letters every released, unsent event. A
broker that cannot be reached no longer kills an event (decisions F16), so a refusal is the way."""

from __future__ import annotations

from sqlalchemy import Engine

from msgx_engine.clock import Clock
from msgx_engine.delivery.dispatcher import Dispatcher, DispatchOptions
from msgx_engine.delivery.producer import KafkaSink
from msgx_engine.store.outbox import SendPolicy

NO_SUCH_TOPIC = "msgx no such topic!"      # an invalid name: the broker refuses every record


def kill_events_for_real(engine: Engine, clock: Clock, bootstrap: str) -> None:
    Dispatcher(engine, KafkaSink(bootstrap, delivery_timeout_s=10.0), clock, topic_msg=NO_SUCH_TOPIC,
               topic_schd=NO_SUCH_TOPIC, options=DispatchOptions(policy=SendPolicy(max_attempts=1))).run()
