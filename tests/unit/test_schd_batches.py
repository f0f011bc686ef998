"""The records of one ``schd`` flush in both formats (D13, FS §8), purely."""

from __future__ import annotations

import json

from msgx_engine.delivery.dispatcher import ARRAY_KEY, latest_per_flid, schd_batches
from msgx_engine.store.outbox import OutboxEvent


def event(event_id: int, flid: str, version: int) -> OutboxEvent:
    payload = json.dumps({"FLID": flid, "STATE_VERSION": version, "PAD": "x" * 40})
    return OutboxEvent(event_id, 1, flid, "state", version, payload)


EVENTS = [event(1, "A", 1), event(2, "B", 1), event(3, "A", 2), event(4, "C", 1)]


def test_records_format_is_one_record_per_flid_marking_all_its_events_d13():
    batches = schd_batches(latest_per_flid(EVENTS), "schd")
    assert [(r.key, json.loads(r.value)["STATE_VERSION"], ids) for r, ids in batches] == [
        ("A", 2, [1, 3]), ("B", 1, [2]), ("C", 1, [4])]


def test_array_format_is_one_array_per_flush_d13():
    ((record, ids),) = schd_batches(latest_per_flid(EVENTS), "schd", "array")
    assert record.key == ARRAY_KEY and sorted(ids) == [1, 2, 3, 4] and record.event_id == 4
    assert [(d["FLID"], d["STATE_VERSION"]) for d in json.loads(record.value)] == [("A", 2), ("B", 1), ("C", 1)]


def test_array_too_large_for_one_record_is_split_never_inside_a_document_d13():
    """An array that would pass ``max_bytes`` is cut between documents; every event is still covered."""
    size = len(EVENTS[0].payload) + 1
    batches = schd_batches(latest_per_flid(EVENTS), "schd", "array", max_bytes=2 * size)
    assert [[d["FLID"] for d in json.loads(r.value)] for r, _ in batches] == [["A", "B"], ["C"]]
    assert sorted(i for _, ids in batches for i in ids) == [1, 2, 3, 4]
    tiny = schd_batches(latest_per_flid(EVENTS), "schd", "array", max_bytes=1)
    assert [len(json.loads(r.value)) for r, _ in tiny] == [1, 1, 1]
