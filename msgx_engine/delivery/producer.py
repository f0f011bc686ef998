"""The Kafka side of delivery: an idempotent producer and a ``send`` that trusts only delivery reports.

D14, idempotent producer (US-07 AC5): ``acks=all``, ``enable.idempotence=true`` and ``max.in.flight=1`` are forced;
configuration that tries to weaken them is refused, not silently downgraded. ``flush()``'s
return value is never read as success: a record counts as delivered only when its own delivery
report arrived without an error. A fatal producer error (confluent-kafka raises it from
``poll``/``flush``/``produce``, e.g. UNKNOWN_PRODUCER_ID after a broker lost its state) makes the
producer unusable; ``KafkaSink`` then builds a new one and the caller resends from its first
unsent record.

Records are compressed (``compression.type``, default lz4), and the delivery
timeout (``message.timeout.ms``, default 120 s) outlasts a broker freeze of a minute or two, so the
idempotent producer retries inside it and the broker drops its duplicates; a shorter timeout made
msgx resend a record the broker had already taken. A record the producer refuses locally (too
large) fails alone and holds back only the later records with its key: other keys go on (per-key
order, C-29).

A producer can also stop delivering without any error that says so: librdkafka answers
UNKNOWN_PRODUCER_ID by bumping its epoch locally (KIP-360) and never asks the broker for a new
producer id, so a broker that lost its state (tansu restarted empty, a rebuilt cluster) refuses
every later request and every record times out, for ever (decision F17, stale producer). ``KafkaSink`` counts the sends
that delivered nothing and only timed out; from the ``STALE_AFTER_TIMEOUTS``-th in a row it asks the
broker for metadata, and when the broker answers (it is up, the producer is not) it drops the
producer like after a fatal error. While the broker does not answer the producer is kept: there is
nothing a new one could do better, and librdkafka reconnects by itself.

Why a record failed decides what becomes of its event (decision F16, refusals make events DEAD): ``SendResult.refused``
names the records the broker or the producer turned down (too large, not authorized, a topic that cannot
exist); only those can make an event DEAD. Every other failure (timeouts, a broker that cannot be
reached, a producer rebuilt) means the broker was not reached: the event waits for as long as that
lasts. The last error the client reported about its brokers (``error_cb``: "Connect to ... failed:
Connection refused") is kept with each send's outcome, so the operator sees the broker's own words.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException, Producer

from msgx_engine.config import ConfigError

log = logging.getLogger(__name__)

FORCED = {"acks": "all", "enable.idempotence": True, "max.in.flight.requests.per.connection": 1}
_FORCED_TEXT = {"acks": ("all", "-1"), "enable.idempotence": ("true",), "max.in.flight.requests.per.connection": ("1",)}


DELIVERY_TIMEOUT_S = 120.0       # MSGX_KAFKA_DELIVERY_TIMEOUT's default
PRODUCER_MAX_BYTES = 1_000_000   # librdkafka's default message.max.bytes; raised only for a larger record limit


def producer_config(bootstrap: str, *, delivery_timeout_s: float = DELIVERY_TIMEOUT_S,
                    compression: str = "lz4", max_record_bytes: int | None = None,
                    extra: Mapping[str, object] | None = None) -> dict[str, object]:
    """The producer configuration; ``extra`` may tune anything except the forced delivery guarantees.
    ``max_record_bytes`` (the pipeline's record limit) raises the producer's own limit when it is
    larger than the default, so a record the pipeline let through is never refused here."""
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "client.id": "msgx-dispatcher",
        "linger.ms": 5,
        "compression.type": compression,
        "message.max.bytes": max(PRODUCER_MAX_BYTES, (max_record_bytes or 0) + 65_536),
        "message.timeout.ms": int(delivery_timeout_s * 1000),  # the send timeout bound (US-07 AC1)
        "reconnect.backoff.max.ms": 2000,  # back within ~2 s of a broker returning
        "log_level": 3,
    }
    for key, value in (extra or {}).items():
        if key in FORCED and str(value).lower() not in _FORCED_TEXT[key]:
            raise ConfigError(f"Kafka producer setting {key}={value!r} is refused: msgx requires "
                              f"{key}={FORCED[key]!r} (D14, US-07 AC5)")
        conf[key] = value
    conf.update(FORCED)
    return conf


@dataclass(frozen=True)
class Record:
    """One Kafka record; ``event_id`` names the outbox row it carries (the last one for ``schd``)."""

    topic: str
    key: str
    value: str
    event_id: int
    headers: tuple[tuple[str, str], ...] = ()


@dataclass
class SendResult:
    """Per-record outcome in input order: ``None`` = delivered (report without error), else why not.
    Only the indexes in ``tried`` were handed to the producer (or refused by it); the others were
    held back (the local queue was full, or an earlier record with the same key was refused) and
    count no attempt. ``refused``: the records turned down for what they are (``is_refusal``), the
    only failures that may make an event DEAD. ``broker_error``: the last error the client reported
    about its brokers since its last delivery (None: none), for the operator."""

    errors: list[str | None]
    fatal: str | None = None
    tried: frozenset[int] = frozenset()
    refused: frozenset[int] = frozenset()
    broker_error: str | None = None

    @property
    def delivered(self) -> list[int]:
        return [i for i, e in enumerate(self.errors) if e is None]

    def failures(self) -> list[tuple[int, str]]:
        """(index, error) of the records that were tried and not delivered."""
        return [(i, e) for i, e in enumerate(self.errors) if e is not None and i in self.tried]


ProducerFactory = Callable[[dict], Producer]

STALE_AFTER_TIMEOUTS = 2     # sends in a row that only timed out before the broker is asked for metadata
PROBE_TIMEOUT_S = 5.0        # how long that metadata request may take


@dataclass
class KafkaSink:
    """Owns one producer at a time; rebuilds it after a fatal error."""

    bootstrap: str
    delivery_timeout_s: float = DELIVERY_TIMEOUT_S
    extra: Mapping[str, object] = field(default_factory=dict)
    factory: ProducerFactory = Producer
    rebuilds: int = 0
    compression: str = "lz4"
    max_record_bytes: int | None = None

    def __post_init__(self) -> None:
        self.config = producer_config(self.bootstrap, delivery_timeout_s=self.delivery_timeout_s,
                                      compression=self.compression, max_record_bytes=self.max_record_bytes,
                                      extra=self.extra)
        self._producer: Producer | None = None
        self._timed_out_sends = 0                # sends in a row that delivered nothing and only timed out
        self._broker_error: str | None = None    # the client's last error about its brokers since a delivery

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            self._producer = self.factory({**self.config, "error_cb": self._on_error})
        return self._producer

    def _on_error(self, err: KafkaError) -> None:
        """librdkafka's client-level errors ("Connect to ... failed: Connection refused", "all
        broker connections are down"), served from poll/flush in this thread: kept for the outcome."""
        self._broker_error = broker_text(err)

    def send(self, records: Sequence[Record]) -> SendResult:
        """Produce in order and wait for every delivery report (bounded by the delivery timeout).
        A record refused locally fails alone; later records with its key are held back, other keys go."""
        reports: dict[int, KafkaError | None] = {}
        refused: dict[int, str] = {}            # produce() refused these records (tried, failed)
        refused_keys: set[tuple[str, str]] = set()
        produced: list[int] = []
        fatal: str | None = None
        try:
            for i, rec in enumerate(records):
                if (rec.topic, rec.key) in refused_keys:
                    continue          # held: its key's earlier record failed, order per key (C-29)
                try:
                    self._produce(rec, i, reports)
                except BufferError:   # local queue full: the rest simply waits for the next round
                    break
                except KafkaException as exc:
                    if _is_fatal(exc):
                        raise
                    refused[i] = f"produce refused: {exc.args[0] if exc.args else exc}"
                    refused_keys.add((rec.topic, rec.key))
                    continue
                produced.append(i)
            self._await(reports, len(produced))
        except KafkaException as exc:
            fatal = str(exc.args[0] if exc.args else exc)
        if fatal is None and len(reports) < len(produced):
            fatal = f"{len(produced) - len(reports)} delivery report(s) missing after {self.delivery_timeout_s:.0f}s"
        if fatal is None:
            fatal = next((_describe(err, "") for err in reports.values() if _poisons_producer(err)), None)
        if fatal is None:
            fatal = self._stale(reports)
        if fatal is not None:
            log.error("Kafka producer unusable (%s); rebuilding it, unsent records are resent", fatal)
            self._discard()
        errors = [_describe(reports.get(i, _MISSING), f"fatal: {fatal}" if fatal else "not produced")
                  for i in range(len(records))]
        for i, why in refused.items():
            errors[i] = why
        turned_down = {i for i, err in reports.items() if err is not None and is_refusal(err)} | refused.keys()
        if any(err is None for err in reports.values()):
            self._broker_error = None            # a delivery: what the client said before is over
        return SendResult(errors, fatal, tried=frozenset(produced) | refused.keys(), refused=frozenset(turned_down),
                          broker_error=self._broker_error)

    def _stale(self, reports: Mapping[int, KafkaError | None]) -> str | None:
        """Count a send that delivered nothing and only timed out; from the ``STALE_AFTER_TIMEOUTS``-th
        in a row, a broker that answers a metadata request means the producer, not the broker, is
        stuck: returns why it must be replaced (None: keep it)."""
        if not reports or any(err is None or err.code() != KafkaError._MSG_TIMED_OUT for err in reports.values()):
            self._timed_out_sends = 0
            return None
        self._timed_out_sends += 1
        if self._timed_out_sends < STALE_AFTER_TIMEOUTS or not self._broker_answers():
            return None
        return (f"{self._timed_out_sends} sends in a row timed out while the broker answers metadata requests "
                "(the producer's idempotence state is stale)")

    def _broker_answers(self) -> bool:
        try:
            self.producer.list_topics(timeout=min(PROBE_TIMEOUT_S, self.delivery_timeout_s))
            return True
        except KafkaException as exc:
            log.info("Kafka broker does not answer a metadata request either (%s); keeping the producer",
                     exc.args[0] if exc.args else exc)
            return False

    def _produce(self, rec: Record, index: int, reports: dict[int, KafkaError | None]) -> None:
        def on_delivery(err: KafkaError | None, _msg, i: int = index) -> None:
            reports[i] = err  # a plain dict store: safe even while a fatal exception is pending

        headers: list[tuple[str, str | bytes | None]] = [(k, v.encode()) for k, v in rec.headers]
        self.producer.produce(rec.topic, key=rec.key.encode(), value=rec.value.encode(), headers=headers,
                              on_delivery=on_delivery)
        self.producer.poll(0)

    def _await(self, reports: dict, produced: int) -> None:
        """Serve delivery reports until all ``produced`` arrived or the delivery timeout passed."""
        deadline = time.monotonic() + self.delivery_timeout_s + 5.0
        while len(reports) < produced and time.monotonic() < deadline:
            self.producer.flush(min(1.0, max(0.0, deadline - time.monotonic())))

    def _discard(self) -> None:
        """Drop the producer: purge what it still holds (those records are resent by the caller)."""
        producer, self._producer = self._producer, None
        self.rebuilds += 1
        self._timed_out_sends = 0
        if producer is None:
            return
        try:
            producer.purge(in_queue=True, in_flight=True)
            producer.flush(0)
        except Exception:  # noqa: BLE001 - a fatal producer may refuse even this
            pass

    def close(self, timeout_s: float = 5.0) -> None:
        if self._producer is not None:
            try:
                self._producer.flush(timeout_s)
            except KafkaException:
                pass
            self._producer = None


_MISSING = object()


def _is_fatal(exc: KafkaException) -> bool:
    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    return err is None or err.fatal() or err.code() == KafkaError._FATAL


# Delivery-report errors after which this producer's idempotence state is no good: seen on tansu
# after a delivery timeout (every later record came back PRODUCER_FENCED, for ever). A new
# producer (new producer id) recovers; the records are resent like after any fatal error.
_PRODUCER_STATE_ERRORS = frozenset({KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH,
                                    KafkaError.UNKNOWN_PRODUCER_ID, KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                    KafkaError.INVALID_PRODUCER_ID_MAPPING})


def _poisons_producer(err: KafkaError | None) -> bool:
    return err is not None and (err.fatal() or err.code() in _PRODUCER_STATE_ERRORS)


# Delivery-report errors that turn a record down for what it is, not for where the broker is: too
# large, not authorized, a topic that cannot exist or does not take such records. Only these may make
# an event DEAD (decision F16); every other failure means the broker was not reached, and the event
# waits for it however long that takes (a timeout, a broker that cannot be reached, a rebuilt producer).
_REFUSALS = frozenset({
    KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE,
    KafkaError.INVALID_MSG_SIZE, KafkaError.INVALID_MSG, KafkaError.INVALID_RECORD, KafkaError.POLICY_VIOLATION,
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.TOPIC_EXCEPTION, KafkaError._UNKNOWN_TOPIC, KafkaError._INVALID_ARG,
    KafkaError.UNSUPPORTED_FOR_MESSAGE_FORMAT, KafkaError.UNSUPPORTED_COMPRESSION_TYPE, KafkaError.INVALID_TIMESTAMP})


def is_refusal(err: KafkaError) -> bool:
    """Did the broker (or the producer) turn this record down for what it is? (See ``_REFUSALS``.)"""
    return err.code() in _REFUSALS and not err.fatal()


_ADDRESS_FAMILY = re.compile(r"\bipv[46]#")


def broker_text(err: KafkaError) -> str:
    """A client error as the operator reads it: librdkafka's own words, without its address-family tag."""
    return _ADDRESS_FAMILY.sub("", err.str())


def _describe(report: object, missing: str) -> str | None:
    if report is _MISSING:
        return missing
    if report is None:
        return None
    assert isinstance(report, KafkaError)
    return f"{report.name()}: {report.str()}"
