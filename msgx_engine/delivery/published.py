"""What the production topics show published: the highest ``event_id`` and, per flight, the highest
``STATE_VERSION`` (decision O19, version floor). ``msgx recover`` reads it when no other installation's state
database can say it: a database restored from an older backup counts below what the consumers hold.

Every retained record of ``msg`` and ``schd`` is read once, from each partition's first offset to
its end. Not only the last records: the last record of a partition need not carry its highest
event id (a flight held in backoff, or a revived dead event, is published after later events of
other flights), and a flight's newest version sits wherever that flight was last published. One
pass over the retained records is an operator's command's cost, paid once per restore. Reading
the topics assumes they still hold every record published since the backup was taken (their
retention is longer than the backup's age): a record dropped by retention cannot be seen.

Headers carry ``event_id`` and ``state_version`` and the key the FLID, so a record's value is read
only in the ``schd`` compatibility shape (``MSGX_SCHD_FORMAT=array``: key ``schd``, one JSON array
of documents), where each document names its flight and version.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from msgx_engine.delivery.dispatcher import ARRAY_KEY
from msgx_engine.redact import safe_text
from msgx_engine.store.version_floor import Published


class TopicsUnreadable(RuntimeError):
    """The topics could not be read to their end: the message says why, in the operator's words."""


class _Highest:
    def __init__(self) -> None:
        self.event_id = 0
        self.versions: dict[str, int] = {}

    def version(self, flid: str, version: int) -> None:
        if version > self.versions.get(flid, 0):
            self.versions[flid] = version

    def record(self, key: bytes | str | None, value: bytes | str | None, headers: object) -> None:
        pairs = headers.items() if isinstance(headers, dict) else headers if isinstance(headers, list) else []
        named = {k: v.decode() if isinstance(v, bytes) else str(v) for k, v in pairs if v is not None}
        if "event_id" in named:
            self.event_id = max(self.event_id, int(named["event_id"]))
        flid = key.decode() if isinstance(key, bytes) else key
        if "state_version" in named and flid is not None and flid != ARRAY_KEY:
            self.version(flid, int(named["state_version"]))
            return
        if value is None:
            return
        docs = orjson.loads(value)
        for doc in docs if isinstance(docs, list) else [docs]:
            if isinstance(doc, dict) and "FLID" in doc and "STATE_VERSION" in doc:
                self.version(str(doc["FLID"]), int(doc["STATE_VERSION"]))


def read_published(bootstrap: str, topics: Sequence[str], *, timeout_s: float = 60.0) -> Published:
    """Every retained record of ``topics`` read to each partition's end (module doc); raises
    ``TopicsUnreadable`` when the broker does not answer or the end is not reached within
    ``timeout_s`` of the last record read."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"msgx-recover-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "enable.partition.eof": True, "log_level": 3})
    highest = _Highest()
    try:
        parts = _partitions(consumer, bootstrap, topics, timeout_s)
        if not parts:
            return Published()
        consumer.assign([TopicPartition(t, p, 0) for t, p in parts])
        at_end: set[tuple[str, int]] = set()
        deadline = time.monotonic() + timeout_s
        while len(at_end) < len(parts):
            if time.monotonic() > deadline:
                raise TopicsUnreadable(f"the production topics at {bootstrap} did not deliver their records to the "
                                       f"end within {timeout_s:.0f}s ({len(at_end)} of {len(parts)} partition(s) "
                                       "read)")
            m = consumer.poll(0.5)
            if m is None:
                continue
            where = (str(m.topic()), int(m.partition() or 0))
            error = m.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(where)
                    continue
                raise TopicsUnreadable(f"reading topic {m.topic()} failed: {safe_text(str(error))}")
            at_end.discard(where)
            deadline = time.monotonic() + timeout_s
            highest.record(m.key(), m.value(), m.headers())
    except KafkaException as exc:
        raise TopicsUnreadable(f"the Kafka broker at {bootstrap} cannot be read: {safe_text(str(exc))}") from exc
    finally:
        consumer.close()
    return Published(highest.event_id, highest.versions)


def _partitions(consumer: Consumer, bootstrap: str, topics: Sequence[str], timeout_s: float) -> list[tuple[str, int]]:
    """Every partition of ``topics``; a topic the broker does not know was never published to."""
    try:
        meta = consumer.list_topics(timeout=min(timeout_s, 10.0))
    except KafkaException as exc:
        raise TopicsUnreadable(f"the Kafka broker at {bootstrap} does not answer "
                               f"({safe_text(str(exc))})") from exc
    found = []
    for topic in topics:
        info = meta.topics.get(topic)
        if info is None or info.error is not None:
            continue
        found += [(topic, p) for p in sorted(info.partitions)]
    return found
