"""The Kafka producer's forced delivery guarantees (D14, US-07 AC5); no broker."""

from __future__ import annotations

import pytest

from msgx_engine.config import ConfigError
from msgx_engine.delivery.producer import producer_config


def test_producer_config_forces_delivery_guarantees():
    """US-07 AC5, D14: acks=all, idempotence, max.in.flight=1 are always set; weakening them is refused."""
    conf = producer_config("h:1", extra={"linger.ms": 20})
    assert conf["acks"] == "all" and conf["enable.idempotence"] is True
    assert conf["max.in.flight.requests.per.connection"] == 1 and conf["linger.ms"] == 20
    for bad in ({"acks": "1"}, {"enable.idempotence": False}, {"max.in.flight.requests.per.connection": 5}):
        with pytest.raises(ConfigError):
            producer_config("h:1", extra=bad)
