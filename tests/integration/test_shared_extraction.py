"""A large package through the real pump with 60% of its records extracted by the helper process
(decision P27): every stored flight is the whole state the package gives (FS §3.3 D1,
US-03 AC2), the same as when the pump extracts them all; and a helper that stops answering costs
a bounded wait, never a message (nothing lost on faults): the pump extracts and hashes itself."""

from __future__ import annotations

import os
import signal

import pytest
from snapshot_builders import dnld, fltr, pump, query, sodt, status

from msgx_engine.handlers.snapshot import package_flights
from msgx_engine.pipeline.large_bodies import offload, package_split
from msgx_engine.sis.content_hash import content_hash
from msgx_engine.sis.decode import decode, parse_xml
from msgx_engine.store.flights import FlightRepository

N = 1200


def package(prefix: str, seqn: int) -> str:
    records = [fltr(f"{prefix}{i:05d}", sodt(9, hhmm=f"{(i // 60) % 24:02d}{i % 60:02d}"), gates=2, desks=3,
                    routes=2, stands=2) for i in range(N)]
    body = dnld(*records, seqn=seqn)
    assert len(body.encode()) >= offload.OFFLOAD_BYTES
    return body


def stored_fields(app, body: str) -> tuple[dict, dict]:
    """(stored fields, the package's own fields) of every flight of ``body``."""
    expected = dict(package_flights(decode(body)))
    with app.engine.connect() as conn:
        states = FlightRepository(conn).load(expected)
    return {flid: dict(s.fields) for flid, s in states.items()}, {flid: dict(f) for flid, f in expected.items()}


@pytest.fixture
def taken_parts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many records each taken helper part held (``package_split.taken`` itself runs)."""
    sizes: list[int] = []
    real = package_split.taken

    def spy(part, start, flids):
        got = real(part, start, flids)
        if got is not None:
            sizes.append(len(got))
        return got

    monkeypatch.setattr(package_split, "taken", spy)
    return sizes


def test_the_helpers_records_are_stored_as_the_pump_would_store_them(app, taken_parts: list[int]) -> None:
    offload.shutdown()
    body = package("S", 430_001)
    (msg_id,) = pump(app, body)
    assert status(app, msg_id) == ("SUCCEEDED", None)
    assert taken_parts == [N - package_split.later_start(N)], "the helper's part was taken"
    stored, expected = stored_fields(app, body)
    assert len(stored) == N and stored == expected


def test_a_stuck_helper_costs_a_bounded_wait_and_the_pump_does_its_work(app, taken_parts: list[int],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    offload.shutdown()
    offload.warm_up()
    worker = offload._worker
    assert worker is not None
    os.kill(worker.pid, signal.SIGSTOP)          # alive, but never answers
    monkeypatch.setattr(offload, "FLIGHTS_WAIT_S", 0.5)
    try:
        body = package("T", 430_002)
        (msg_id,) = pump(app, body)
    finally:
        if worker.poll() is None:
            os.kill(worker.pid, signal.SIGCONT)
    assert status(app, msg_id) == ("SUCCEEDED", None)
    assert taken_parts == [], "nothing came from the stuck helper"
    assert worker.wait(timeout=10) is not None, "the stuck helper was stopped"
    stored, expected = stored_fields(app, body)
    assert len(stored) == N and stored == expected
    (stored_hash,) = query(app, "SELECT payload_hash FROM proc_state WHERE msg_id = :m", m=msg_id)[0]
    assert stored_hash == content_hash(parse_xml(body)), "hashed in place"
    again = package("U", 430_003)                   # the next large body gets a new helper
    (next_id,) = pump(app, again)
    assert status(app, next_id) == ("SUCCEEDED", None)
    assert offload._worker is not None and offload._worker is not worker
    assert taken_parts == [N - package_split.later_start(N)]
