"""The Kafka producer's forced delivery guarantees (D14, US-07 AC5), its compression, timeout and
record-size settings (and the dispatch schedule's skip; no broker."""

from __future__ import annotations

import dagster as dg
import pytest

from msgx_dagster.jobs.dispatch import dispatch_job
from msgx_dagster.schedules import dispatch_schedule
from msgx_engine.config import ConfigError, Settings
from msgx_engine.delivery.producer import producer_config
from msgx_engine.delivery.runner import stop_wait_s
from msgx_engine.store.outbox import (
    RECORD_OVERHEAD_BYTES,
    TOPIC_SCHD,
    OutboxRow,
    RecordTooLarge,
    check_record_sizes,
    record_bytes,
)


def test_producer_config_forces_delivery_guarantees():
    """US-07 AC5, D14: acks=all, idempotence, max.in.flight=1 are always set; weakening them is refused."""
    conf = producer_config("h:1", extra={"linger.ms": 20})
    assert conf["acks"] == "all" and conf["enable.idempotence"] is True
    assert conf["max.in.flight.requests.per.connection"] == 1 and conf["linger.ms"] == 20
    for bad in ({"acks": "1"}, {"enable.idempotence": False}, {"max.in.flight.requests.per.connection": 5}):
        with pytest.raises(ConfigError):
            producer_config("h:1", extra=bad)


def test_producer_compresses_and_waits_out_a_broker_freeze_by_default():
    """Lz4 compression and a 120 s delivery timeout (message.timeout.ms)
    unless configured; the producer's own size limit never undercuts the pipeline's record limit."""
    conf = producer_config("h:1")
    assert conf["compression.type"] == "lz4" and conf["message.timeout.ms"] == 120_000
    assert conf["message.max.bytes"] == 1_000_000
    conf = producer_config("h:1", compression="zstd", delivery_timeout_s=300, max_record_bytes=2_000_000)
    assert conf["compression.type"] == "zstd" and conf["message.timeout.ms"] == 300_000
    assert conf["message.max.bytes"] > 2_000_000


def test_record_size_counts_utf8_bytes_and_refuses_over_the_limit():
    """The check counts the record's UTF-8 bytes (key, value, header allowance),
    names the flight and the setting, and passes a record at the limit."""
    row = OutboxRow(1, "F1", TOPIC_SCHD, "state", 1, "航" * 1000)          # 3,000 bytes of UTF-8
    assert record_bytes(row) == 3000 + 2 + RECORD_OVERHEAD_BYTES
    check_record_sizes([row], record_bytes(row))
    with pytest.raises(RecordTooLarge, match="flight F1.*MSGX_KAFKA_MAX_RECORD_BYTES"):
        check_record_sizes([OutboxRow(1, "F0", TOPIC_SCHD, "state", 1, "{}"), row], record_bytes(row) - 1)


def test_kafka_and_http_settings_from_the_environment(monkeypatch):
    """Defaults (900,000-byte records, lz4, 120 s delivery timeout; HTTP
    headers 10 s, body 30 s, 100 connections), values read from MSGX_*, nonsense refused (OPS-1)."""
    monkeypatch.setenv("MSGX_DB_URL", "postgresql://x/y")
    monkeypatch.setenv("MSGX_MAILBOX_URL", "mysql://x/y")
    s = Settings.from_env()
    assert (s.kafka_max_record_bytes, s.kafka_compression, s.kafka_delivery_timeout_s) == (900_000, "lz4", 120.0)
    assert (s.http_header_timeout_s, s.http_body_timeout_s, s.http_max_connections) == (10.0, 30.0, 100)
    assert stop_wait_s(s) > s.kafka_delivery_timeout_s + 10      # a stopping dispatcher outlasts one send
    for name, value in {"MSGX_KAFKA_MAX_RECORD_BYTES": "500000", "MSGX_KAFKA_COMPRESSION": "ZSTD",
                        "MSGX_KAFKA_DELIVERY_TIMEOUT": "5m", "MSGX_HTTP_HEADER_TIMEOUT": "5s",
                        "MSGX_HTTP_BODY_TIMEOUT": "1m", "MSGX_HTTP_MAX_CONNECTIONS": "20"}.items():
        monkeypatch.setenv(name, value)
    s = Settings.from_env()
    assert (s.kafka_max_record_bytes, s.kafka_compression, s.kafka_delivery_timeout_s) == (500_000, "zstd", 300.0)
    assert (s.http_header_timeout_s, s.http_body_timeout_s, s.http_max_connections) == (5.0, 60.0, 20)
    for name, bad in [("MSGX_KAFKA_MAX_RECORD_BYTES", "1MB"), ("MSGX_KAFKA_COMPRESSION", "brotli"),
                      ("MSGX_KAFKA_DELIVERY_TIMEOUT", "6m"), ("MSGX_KAFKA_DELIVERY_TIMEOUT", "5s"),
                      ("MSGX_HTTP_MAX_CONNECTIONS", "0"), ("MSGX_HTTP_BODY_TIMEOUT", "soon")]:
        monkeypatch.setenv(name, bad)
        with pytest.raises(ConfigError, match=name):
            Settings.from_env()
        monkeypatch.delenv(name)


def test_dispatch_schedule_skips_while_a_dispatch_run_is_queued_or_running():
    """A dispatch run can outlast its minute by one send's wait (the delivery
    timeout), so the schedule skips while one is queued or running instead of piling up runs."""
    with dg.instance_for_test() as instance:     # a temporary sqlite instance (the context needs its ref)
        with dg.build_schedule_context(instance=instance) as ctx:
            assert isinstance(dispatch_schedule(ctx), dg.RunRequest)
        instance.create_run_for_job(dispatch_job, status=dg.DagsterRunStatus.STARTED)
        with dg.build_schedule_context(instance=instance) as ctx:
            result = dispatch_schedule(ctx)
        assert isinstance(result, dg.SkipReason) and "still queued or running" in (result.skip_message or "")
