"""The Kafka producer's forced delivery guarantees (D14, US-07 AC5), its compression, timeout and
record-size settings, the sink's own decisions (a stale producer, refusals, the client's error text)
with a fake producer, and the dispatch schedule's skip; no broker."""

from __future__ import annotations

import dagster as dg
import pytest
from confluent_kafka import KafkaError, KafkaException

from msgx_dagster.jobs.dispatch import dispatch_job
from msgx_dagster.schedules import dispatch_schedule
from msgx_engine.config import ConfigError, Settings
from msgx_engine.delivery.producer import STALE_AFTER_TIMEOUTS, KafkaSink, Record, is_refusal, producer_config
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


class FakeProducer:
    """A producer whose every record gets ``report`` as its delivery report at the next flush, and
    whose metadata request answers or not (``answers``). Only for the sink's own decisions."""

    def __init__(self, config: dict, report: KafkaError | None, answers: bool, client_error: KafkaError | None):
        self.error_cb = config["error_cb"]
        self.report, self.answers, self.client_error = report, answers, client_error
        self.pending: list = []

    def produce(self, topic, key, value, headers, on_delivery):
        self.pending.append(on_delivery)

    def poll(self, timeout):
        return 0

    def flush(self, timeout=None):
        if self.client_error is not None:
            self.error_cb(self.client_error)
        for cb in self.pending:
            cb(self.report, None)
        self.pending = []
        return 0

    def list_topics(self, timeout=None):
        if not self.answers:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        return object()

    def purge(self, **kw):
        pass


def fake_sink(report: KafkaError | None, *, answers: bool = True, client_error: KafkaError | None = None) -> KafkaSink:
    return KafkaSink("127.0.0.1:1", delivery_timeout_s=1.0,
                     factory=lambda conf: FakeProducer(conf, report, answers, client_error))


RECORDS = [Record("msg", "F1", "{}", 1), Record("msg", "F2", "{}", 2)]


def test_a_producer_that_only_times_out_on_a_broker_that_answers_is_rebuilt():
    """US-07 AC1, F17: sends that deliver nothing and only time out are counted; from the
    STALE_AFTER_TIMEOUTS-th in a row the broker is asked for metadata, and when it answers the
    producer is dropped (the next send builds a new one). A broker that does not answer keeps it."""
    timed_out = KafkaError(KafkaError._MSG_TIMED_OUT)
    sink = fake_sink(timed_out)
    results = [sink.send(RECORDS) for _ in range(STALE_AFTER_TIMEOUTS)]
    assert [r.fatal is None for r in results] == [True] * (STALE_AFTER_TIMEOUTS - 1) + [False]
    assert sink.rebuilds == 1 and "answers metadata" in (results[-1].fatal or "")
    assert all(r.failures() and not r.refused for r in results)     # timeouts: never refusals
    down = fake_sink(timed_out, answers=False)
    for _ in range(STALE_AFTER_TIMEOUTS + 2):
        assert down.send(RECORDS).fatal is None
    assert down.rebuilds == 0


def test_refusals_are_told_from_a_broker_that_was_not_reached():
    """US-07 AC1, F16: only what the broker refuses for the record itself (too large, not
    authorized, a topic that cannot exist) is a refusal, which may make an event DEAD; timeouts, a
    broker that cannot be reached and a producer whose state is gone are not."""
    for code in (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.TOPIC_EXCEPTION,
                 KafkaError.RECORD_LIST_TOO_LARGE, KafkaError._UNKNOWN_TOPIC):
        assert is_refusal(KafkaError(code)), code
    for code in (KafkaError._MSG_TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
                 KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.REQUEST_TIMED_OUT,
                 KafkaError.UNKNOWN_PRODUCER_ID, KafkaError._PURGE_QUEUE):
        assert not is_refusal(KafkaError(code)), code
    result = fake_sink(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)).send(RECORDS)
    assert result.refused == {0, 1} and result.fatal is None


def test_the_clients_last_words_about_the_broker_come_with_the_outcome():
    """OPS-2, M27: librdkafka's client-level error ("Connect to ... failed: Connection
    refused", delivered through error_cb) is kept with each send's outcome until a delivery, in the
    operator's words (without the ipv4# tag)."""
    refused = KafkaError(KafkaError._TRANSPORT, "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: "
                                                "Connection refused (after 0ms in state CONNECT)")
    result = fake_sink(KafkaError(KafkaError._MSG_TIMED_OUT), client_error=refused).send(RECORDS)
    assert result.broker_error == ("127.0.0.1:1/bootstrap: Connect to 127.0.0.1:1 failed: Connection refused "
                                   "(after 0ms in state CONNECT)")
    assert fake_sink(None).send(RECORDS).broker_error is None
