"""Redis projection flightInfo against real Redis servers: INV-23, INV-24, D10, DESIGN §2 step 8."""

from __future__ import annotations

import json
import logging
import threading
import uuid
from dataclasses import replace
from types import MappingProxyType

import pytest
import redis
from sqlalchemy import func, select, text

from msgx_engine.app import App
from msgx_engine.delivery.projection import DEFAULT_KEY, Projection, connect
from msgx_engine.pipeline.pump import PumpOptions
from msgx_engine.state.model import FlightState
from msgx_engine.state.serialize import state_json
from msgx_engine.store import locks
from msgx_engine.store.flights import FlightRepository
from msgx_engine.store.tables import backfill_todo, msg_event, proc_state
from tests.builders import flop, gtdt
from tests.private_servers import wait_for


def process(app: App, *messages: str) -> None:
    for m in messages:
        app.mailbox.put(m)
    app.pump(PumpOptions(exit_when_waiting=True, idle_poll_s=0.01)).run()


def pg_json(app: App) -> dict[str, str]:
    with app.engine.connect() as conn:
        return {s.flid: state_json(s) for s in FlightRepository(conn).load_all_current()}


@pytest.fixture
def shared_projection(redis_url):
    """A uniquely named projection on the shared Redis (never the real flightInfo key)."""
    client = connect(redis_url)
    proj = Projection(client, key=f"flightInfo_test_{uuid.uuid4().hex[:8]}")
    yield proj
    client.delete(proj.key, proj.version_key)
    client.close()


def waiting_on_a_lock(app: App) -> bool:
    """Some session of this test's database waits for a row lock (pg_locks: not granted)."""
    with app.engine.connect() as conn:
        return bool(conn.execute(text(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE NOT l.granted AND a.datname = current_database()")).scalar_one())


def state(flid: str, version: int, **fields: str) -> FlightState:
    return FlightState(flid=flid, fields=MappingProxyType(dict(sorted(fields.items()))), state_version=version)


def test_app_wires_projection_and_removes_deleted_flights(settings, clock, own_redis):
    """INV-23, D10: with MSGX_REDIS_URL set the App projects each touched flight into hash flightInfo
    (field FLID, value = the schd whole-state JSON) before the message is terminal; a deleted
    flight is removed."""
    app = App.from_settings(replace(settings, redis_url=own_redis.url), clock=clock)
    process(app, gtdt("P1", (1, "A1")), gtdt("P2", (1, "B1")), gtdt("P1", (1, "A2"), (2, "A3")))
    client = connect(own_redis.url)
    assert client.hgetall(DEFAULT_KEY) == pg_json(app)
    assert json.loads(client.hget(DEFAULT_KEY, "P1"))["STATE_VERSION"] == 2
    process(app, flop("FDEL", "P2", "\t\t<FDEL></FDEL>\n"))
    assert client.hget(DEFAULT_KEY, "P2") is None and client.hget(f"{DEFAULT_KEY}:version", "P2") == "2"
    assert client.hgetall(DEFAULT_KEY) == pg_json(app)
    app.dispose()




def test_version_guard_keeps_newer_and_removes_codeshare(shared_projection):
    """D10 version guard: an older write never overwrites a newer value or resurrects a removed
    flight; an equal version is rewritten (idempotent redo); code-share (MAID) flights are removed."""
    p = shared_projection
    assert p.apply([state("V1", 3, FLNO="CA3")]) == 0
    assert p.apply([state("V1", 2, FLNO="CA2")]) == 1
    assert json.loads(p.get("V1"))["FLNO"] == "CA3"
    assert p.apply([state("V1", 3, FLNO="CA3")]) == 0
    p.apply([replace(state("V1", 4), deleted=True)])
    assert p.get("V1") is None
    assert p.apply([state("V1", 3, FLNO="CA3")]) == 1 and p.get("V1") is None
    p.apply([state("V2", 1, FLNO="CA9")])
    p.apply([state("V2", 2, FLNO="CA9", MAID="77")])
    assert p.get("V2") is None


def test_d22_redis_outage_keeps_the_message_open_for_as_long_as_it_takes(settings, clock, own_redis, caplog):
    """D22, INV-23, INV-17b, INV-20b (supersedes decisions P5): with Redis stopped the message
    whose state transaction 1 committed stays open for as long as the outage lasts (here 15
    minutes, longer than the 10-minute head deadline and far more than 5 attempts): FAILED with
    error class PROJECTION, no attempt used, never DEAD, not marked, no backfill todo, its events
    not released, the next message waiting behind it; the head looks again with a backoff capped
    at 30 s, and one ALERT fires once it has waited 60 s. When Redis returns the message completes
    without applying its state again and the projection holds it (the version guard takes it),
    then the queue moves on."""
    app = App.from_settings(replace(settings, redis_url=own_redis.url), clock=clock)
    process(app, gtdt("R1", (1, "A1")))
    own_redis.stop()
    with caplog.at_level(logging.WARNING):
        process(app, gtdt("R1", (1, "B1")), gtdt("R2", (1, "C1")))
        waiting, behind = _last_two(app)
        delays = []
        for _ in range(40):                        # 40 looks, ~15 minutes of outage
            row = _proc(app, waiting)
            delays.append((row.next_attempt_at - clock.now()).total_seconds())
            assert (row.status, row.error_class, row.attempts) == ("FAILED", "PROJECTION", 0)
            assert row.applied_at is not None and row.terminal_at is None
            clock.advance(delays[-1])
            process(app)
    assert delays[:7] == [1, 1, 2, 4, 8, 16, 30] and set(delays[7:]) == {30}
    with app.engine.connect() as conn:
        assert conn.execute(select(func.count()).where(msg_event.c.msg_id == waiting,
                                                       msg_event.c.released_at.is_not(None))).scalar_one() == 0
        assert conn.execute(select(func.count()).where(backfill_todo.c.msg_id == waiting)).scalar_one() == 0
    assert app.mailbox.processed_at([waiting])[waiting] is None
    assert _proc(app, behind).status == "PENDING"
    alerts = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ALERT")]
    assert len(alerts) == 1 and "projection" in alerts[0] and f"mailbox id {waiting}" in alerts[0]

    own_redis.start()
    clock.advance(30)
    process(app)
    assert (_proc(app, waiting).status, _proc(app, behind).status) == ("SUCCEEDED", "SUCCEEDED")
    assert app.mailbox.processed_at([waiting])[waiting] is not None
    with app.engine.connect() as conn:
        assert conn.execute(select(func.count()).where(msg_event.c.msg_id == waiting)).scalar_one() == 2
    client = connect(own_redis.url)
    assert json.loads(client.hget(DEFAULT_KEY, "R1"))["STATE_VERSION"] == 2
    assert json.loads(client.hget(DEFAULT_KEY, "R1"))["GTDT"][0]["GATE"] == "B1"
    assert client.hgetall(DEFAULT_KEY) == pg_json(app)
    app.dispose()


def _last_two(app: App) -> tuple[int, int]:
    with app.engine.connect() as conn:
        ids = conn.execute(select(proc_state.c.msg_id).order_by(proc_state.c.msg_id.desc()).limit(2)).scalars()
        later, earlier = list(ids)
    return earlier, later


def _proc(app: App, msg_id: int):
    with app.engine.connect() as conn:
        return conn.execute(select(proc_state).where(proc_state.c.msg_id == msg_id)).one()


def test_flushed_redis_is_rebuilt_and_drift_is_caught(settings, clock, own_redis):
    """INV-24, D10: after FLUSHALL the rebuild restores the projection from PostgreSQL (and its
    version guard); the drift check reports a hand-edited, a missing and a foreign value."""
    app = App.from_settings(replace(settings, redis_url=own_redis.url), clock=clock)
    process(app, *[gtdt(f"W{i}", (1, f"G{i}")) for i in range(5)], flop("FDEL", "W4", "\t\t<FDEL></FDEL>\n"))
    client = connect(own_redis.url)
    proj = Projection(client)
    before = client.hgetall(DEFAULT_KEY)
    assert len(before) == 4 and proj.drift(app.engine).total == 0
    client.flushall()
    assert proj.drift(app.engine).missing == 4
    assert proj.rebuild(app.engine) == 4
    assert client.hgetall(DEFAULT_KEY) == before
    assert client.hget(proj.version_key, "W4") == "2"
    assert proj.apply([state("W4", 1, FLNO="old")]) == 1  # the guard came back with it
    edited = json.loads(before["W1"]) | {"STND": "999"}
    client.hset(DEFAULT_KEY, "W1", json.dumps(edited))
    client.hdel(DEFAULT_KEY, "W2")
    client.hset(DEFAULT_KEY, "ZZ", "{}")
    drift = proj.drift(app.engine)
    assert (drift.differing, drift.missing, drift.extra, drift.total) == (1, 1, 1, 3)
    assert drift.sample == ["W1", "W2", "ZZ"]
    proj.rebuild(app.engine)
    assert proj.drift(app.engine).total == 0
    app.dispose()


def test_redis_error_raises_from_hook(settings, clock):
    """INV-23: the hook raises when Redis is unreachable (so the pipeline keeps the message open)."""
    proj = Projection(connect("redis://127.0.0.1:1/0", timeout_s=0.5))
    with pytest.raises(redis.ConnectionError):
        proj.hook(None, 1, [state("E1", 1)])  # type: ignore[arg-type]


def test_drift_takes_the_writer_lock_only_for_flights_that_differ(app, shared_projection):
    """With nothing differing, drift() completes
    while another transaction holds the writer lock (the pump is never stopped by it); a difference
    is re-checked under the lock, so drift() waits for that transaction and counts what is true
    after it."""

    with app.engine.begin() as conn:
        FlightRepository(conn).persist_next_states([state("L1", 1, FLNO="A"), state("L2", 1, FLNO="B")])
    shared_projection.rebuild(app.engine)
    with app.engine.connect() as holder, holder.begin():
        locks.lock_writer_row(holder)            # a message's transaction 1 in progress
        assert shared_projection.drift(app.engine).total == 0
    shared_projection.client.hdel(shared_projection.key, "L2")
    result: list = []
    with app.engine.connect() as holder:
        holder.begin()
        locks.lock_writer_row(holder)
        checker = threading.Thread(target=lambda: result.append(shared_projection.drift(app.engine)))
        checker.start()
        wait_for(lambda: waiting_on_a_lock(app), "drift() waiting for the writer lock", timeout=30)
        assert checker.is_alive()                # the candidate L2 is re-checked under the lock
        shared_projection.client.hset(shared_projection.key, "L2", pg_json(app)["L2"])   # repaired meanwhile
        holder.commit()
    checker.join(30)
    assert result and result[0].total == 0 and result[0].pg_count == 2


def test_drift_compares_versions_for_every_flight_and_documents_for_a_sample_o18(app, shared_projection):
    """O18: the drift check finds a lost write (Redis keeps an older version) whether or not the
    flight is among the documents it compares; a document edited in Redis under its version is found
    only when the sample includes it; the cost of the first pass does not grow with whole documents."""
    with app.engine.begin() as conn:
        FlightRepository(conn).persist_next_states([state(f"V{i}", 1, FLNO=f"A{i}") for i in range(6)])
    shared_projection.rebuild(app.engine)
    assert shared_projection.drift(app.engine, documents=0).total == 0
    with app.engine.begin() as conn:                     # V1 moves on; its projection write is lost
        FlightRepository(conn).persist_next_states([state("V1", 2, FLNO="B1")])
    drift = shared_projection.drift(app.engine, documents=0)
    assert (drift.differing, drift.sample) == (1, ["V1"])
    shared_projection.apply([state("V1", 2, FLNO="B1")])
    edited = json.loads(pg_json(app)["V2"]) | {"STND": "999"}
    shared_projection.client.hset(shared_projection.key, "V2", json.dumps(edited))    # same version
    assert shared_projection.drift(app.engine, documents=0).total == 0
    drift = shared_projection.drift(app.engine, documents=6)
    assert (drift.differing, drift.sample, drift.pg_count, drift.redis_count) == (1, ["V2"], 6, 6)
