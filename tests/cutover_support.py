"""What the cut-over tests share (``tests/e2e/test_cutover*.py``): two installations' configurations
on one mailbox, ``msgx`` run in process with exactly one installation's settings, and readers of
their state databases."""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

import pytest
from sqlalchemy import text

from msgx_engine.cli import main as cli
from msgx_engine.db import make_engine
from msgx_engine.delivery.projection import connect
from msgx_engine.demo.day import demo_day
from msgx_engine.sis.times import LOCAL_TZ
from tests.snapshot_builders import fltr, schd

TODAY = datetime.now(LOCAL_TZ).date()
STAMP = TODAY.strftime("%d%b%y").upper()        # SIS DDMONYY of today, the day the plans are for
DAY = [m.body for m in demo_day(TODAY).messages][:500]
BATCHES = [DAY[i:i + 100] for i in range(0, 500, 100)]


@pytest.fixture
def run_as(monkeypatch, capsys):
    """``run_as(env, *argv)`` -> (exit code, stdout, stderr) of ``msgx ARGV`` with exactly ``env``'s
    MSGX_ settings (an installation's configuration)."""
    def call(env: dict[str, str], *argv: str) -> tuple[int, str, str]:
        for key in [k for k in os.environ if k.startswith("MSGX_")]:
            monkeypatch.delenv(key)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        code = cli.main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return call


@pytest.fixture
def two(settings, pg_dbs, kafka_bootstrap, redis_url):
    """The two installations' configurations: ``a`` production, ``b`` its shadow, ``b_live`` the
    shadow's configuration after the promote (production topics and key, the same database)."""
    tag = uuid.uuid4().hex[:8]
    base = {"MSGX_MAILBOX_URL": settings.mailbox_url, "MSGX_HOME": str(settings.home),
            "MSGX_KAFKA_BOOTSTRAP": kafka_bootstrap, "MSGX_REDIS_URL": redis_url}
    production = {"MSGX_TOPIC_MSG": f"cut_msg_{tag}", "MSGX_TOPIC_SCHD": f"cut_schd_{tag}",
                  "MSGX_REDIS_KEY": f"cut:{tag}:flightInfo"}
    shadow = {"MSGX_MODE": "shadow", "MSGX_TOPIC_MSG": f"cut_shadow_msg_{tag}",
              "MSGX_TOPIC_SCHD": f"cut_shadow_schd_{tag}", "MSGX_REDIS_KEY": f"cut:{tag}:shadow"}
    b_url = pg_dbs.fresh()
    yield {"a": {**base, **production, "MSGX_DB_URL": settings.db_url},
           "b": {**base, **shadow, "MSGX_DB_URL": b_url},
           "b_live": {**base, **production, "MSGX_DB_URL": b_url}}
    client = connect(redis_url)
    client.delete(*[f"cut:{tag}:{k}" for k in ("flightInfo", "flightInfo:version", "shadow", "shadow:version")])
    client.close()


def ok(done: tuple[int, str, str]) -> str:
    code, out, err = done
    assert code == 0, (out + err)[-3000:]
    return out


def refused(done: tuple[int, str, str], words: str) -> str:
    code, out, err = done
    assert code == 2 and words in err, (code, out + err)
    return err


def signed(*argv: str) -> tuple[str, ...]:
    return (*argv, "--operator", "ops.wang", "--reason", "go-live rehearsal")


def scalar(url: str, sql: str, **params):
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(text(sql), params).scalar_one()
    finally:
        engine.dispose()


def msg_events(url: str) -> Counter:
    """msg_id -> how many ``msg`` events this installation's outbox holds for it."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return Counter(dict(conn.execute(text(
                "SELECT msg_id, count(*) FROM msg_event WHERE topic = 'msg' GROUP BY msg_id")).fetchall()))
    finally:
        engine.dispose()


def both_drain(run_as, env: dict[str, str]) -> None:
    ok(run_as(env, "pump", "--drain"))
    ok(run_as(env, "dispatch", "--drain"))


# --- a day-plan request from the installation holding the right, and the AODB's answer -----------
def request_and_answer(app, run_as, env: dict[str, str], window: tuple[str, str], flid: str, hhmm: str) -> int:
    """``msgx request rqfd`` for today's ``window`` (HH:MM, HH:MM) and ``msgx request track`` as
    ``env`` (one request written to COUTMSGS); then the AODB's answer in the mailbox, a SCHD/RESP
    without SEQN echo listing one flight, ``flid`` at ``hhmm`` today: the flights of the window it
    does not list are deleted. Returns the answer's mailbox id."""
    start, end = (f"{TODAY:%Y-%m-%d} {t}" for t in window)
    ok(run_as(env, "request", "rqfd", "--start", start, "--end", end))
    assert len(json.loads(ok(run_as(env, "request", "track")))["sent"]) == 1
    # the installations run on PostgreSQL's clock: the answer is stamped by it, after the request
    stamp = scalar(env["MSGX_DB_URL"], "SELECT to_char(now() AT TIME ZONE 'Asia/Shanghai', 'YYYYMMDDHH24MISS')")
    return app.mailbox.put(schd("RESP", fltr(flid, f"{STAMP}{hhmm}"), dttm=stamp))


def verdict(url: str, msg_id: int) -> str:
    return scalar(url, "SELECT status || ':' || coalesce(reason, '') FROM proc_state WHERE msg_id = :m", m=msg_id)


def live(url: str) -> str:
    return scalar(url, "SELECT string_agg(flid, ',' ORDER BY flid) FROM flight_schd WHERE NOT deleted")


# --- a consumer that follows docs/delivery.md literally ------------------------------------------
@dataclass
class Follower:
    """A consumer of the production topics doing exactly what docs/delivery.md asks: on ``msg`` keep
    the highest ``event_id`` per FLID and drop a record whose ``event_id`` is not above it (the
    stricter of the page's two rules); on ``schd`` keep per FLID the highest ``STATE_VERSION``
    applied and drop anything not newer. Records are taken in each partition's order (a FLID's
    records share one partition). ``lost`` lists every dropped record that was not a resend of
    what it holds: a change it will never see."""

    event_ids: dict[str, int] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    documents: dict[str, dict] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)
    taken: int = 0

    def take_msg(self, flid: str, event_id: int) -> None:
        held = self.event_ids.get(flid, 0)
        if event_id > held:
            self.event_ids[flid] = event_id
            self.taken += 1
        elif event_id < held:
            self.lost.append(f"msg {flid}: event_id {event_id} after {held}")

    def take_schd(self, flid: str, document: dict) -> None:
        version, held = int(document["STATE_VERSION"]), self.versions.get(flid, 0)
        if version > held:
            self.versions[flid], self.documents[flid] = version, document
            self.taken += 1
        elif version < held or document != self.documents[flid]:
            self.lost.append(f"schd {flid}: STATE_VERSION {version} after {held}")

    def consume(self, reader, env: dict[str, str], msg_count: int) -> Follower:
        """Every record of the installation's production topics, from the start."""
        for r in reader(env["MSGX_KAFKA_BOOTSTRAP"], env["MSGX_TOPIC_MSG"], msg_count):
            self.take_msg(r.key, int(r.headers["event_id"]))
        for r in reader(env["MSGX_KAFKA_BOOTSTRAP"], env["MSGX_TOPIC_SCHD"], 1):
            self.take_schd(r.key, json.loads(r.value))
        return self

    def holds_projection(self, redis_url: str, key: str) -> list[str]:
        """The flights whose whole state in the Redis projection (``key``, the installation that
        holds the right now) is not the document this consumer holds: [] when it has every change."""
        client = connect(redis_url)
        try:
            projection = {str(f): json.loads(v) for f, v in client.hgetall(key).items()}
        finally:
            client.close()
        assert projection
        return sorted(f for f, doc in projection.items() if self.documents.get(f) != doc)
