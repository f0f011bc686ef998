"""A shadow that starts after production (OPS-3 "input replayed", OPS-4's comparison), and a shadow's
day beside production that leaves everything production owns as it was (OPS-3, D29).

Everything runs as operators run it: ``msgx`` console scripts on real PostgreSQL, MariaDB, a
private Kafka-wire broker and a private Redis. Production processes and marks a generated airport
day (the demo's day, every flight flown) first; the shadow starts afterwards.
"""

from __future__ import annotations

import json
import subprocess
from datetime import datetime

import psycopg
from sqlalchemy import text

from msgx_engine.db import make_engine
from msgx_engine.delivery.projection import connect
from msgx_engine.demo.day import demo_day
from msgx_engine.sis.times import LOCAL_TZ
from tests.conftest import MSGX_BIN
from tests.pipeline_support import mailbox_checksum
from tests.snapshot_builders import day_package

TODAY = datetime.now(LOCAL_TZ).date()
SHADOW_TOPICS = {"MSGX_TOPIC_MSG": "shadow-msg", "MSGX_TOPIC_SCHD": "shadow-schd"}


def msgx(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([MSGX_BIN, *args], env=env, capture_output=True, text=True, timeout=600)


def ok(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return done


def history_then_day(app) -> tuple[list[int], list[int]]:
    """Rows of an old day (before the live days: out of the comparison's scope) and then today's
    generated day; returns (history ids, day ids)."""
    history = app.mailbox.put_many([day_package(["OLD1", "OLD2"], day=9)])
    day = app.mailbox.put_many([m.body for m in demo_day(TODAY).messages])
    return history, day


def compare(env: dict[str, str], against: str) -> tuple[int, dict]:
    done = msgx(env, "compare", "--against", against, "--json")
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def test_ops3_a_shadow_started_late_replays_from_the_days_first_id_and_matches_production(app, pg_dbs, env_for):
    """OPS-3 (input replayed), OPS-4: production has processed and marked a whole day before any
    shadow exists. A shadow left to adopt the mailbox takes that day as history and compares with
    every flight missing; a shadow given the day's first id (``msgx shadow start-from``, audited)
    replays it, whatever production marked, and reaches 0 unexplained differences against
    production at once. Rows before its start stay history (the old day's flights are not built)."""
    history, day = history_then_day(app)
    production = env_for()
    ok(msgx(production, "pump", "--drain"))
    assert all(v is not None for v in app.mailbox.processed_at([*history, *day]).values())
    marks_before = app.mailbox.processed_at([*history, *day])

    adopted = env_for(MSGX_DB_URL=pg_dbs.fresh(), MSGX_MODE="shadow")
    ok(msgx(adopted, "pump", "--drain"))
    code, naive = compare(adopted, app.settings.db_url)
    assert code == 1 and naive["flights"]["here"] == 0
    assert naive["differences"]["by_class"]["missing_here"] > 200, naive["differences"]

    shadow_url = pg_dbs.fresh()
    shadow = env_for(MSGX_DB_URL=shadow_url, MSGX_MODE="shadow")
    started = ok(msgx(shadow, "shadow", "start-from", str(day[0]), "--operator", "ops.wang",
                      "--reason", "parallel run from today's first message"))
    assert f"starts at mailbox id {day[0]}" in started.stdout and f"{len(day)} of them" in started.stdout
    ok(msgx(shadow, "pump", "--drain"))
    code, report = compare(shadow, app.settings.db_url)
    assert code == 0, report["differences"]
    assert report["verdict"] == "pass" and report["differences"]["total"] == 0
    assert report["flights"]["compared"] == report["flights"]["equal"] > 200

    engine = make_engine(shadow_url)
    try:
        with engine.connect() as conn:
            registered = conn.execute(text("SELECT min(msg_id), count(*) FROM proc_state")).one()
            (operator, selection), = conn.execute(text(
                "SELECT operator, selection FROM operator_audit WHERE action = 'shadow_start_from'")).fetchall()
            old = conn.execute(text("SELECT count(*) FROM flight_schd WHERE flid LIKE 'OLD%'")).scalar_one()
    finally:
        engine.dispose()
    assert tuple(registered) == (day[0], len(day)) and old == 0
    assert operator == "ops.wang" and json.loads(selection)["start_id"] == day[0]
    assert app.mailbox.processed_at([*history, *day]) == marks_before      # the shadow wrote no mark

    again = msgx(shadow, "shadow", "start-from", str(day[0]), "--operator", "ops.wang", "--reason", "again")
    assert again.returncode == 2 and "already registered" in again.stderr


def test_ops3_shadow_start_from_is_refused_outside_a_fresh_shadow(app, pg_dbs, env_for):
    """OPS-3: the starting point is set only where it means what it says: never on a production
    installation (exit 2), never at an id that is no mailbox row (exit 2); nothing is recorded."""
    [first] = app.mailbox.put_many([day_package(["SF1"], day=9)])
    production = msgx(env_for(), "shadow", "start-from", str(first), "--operator", "ops.wang", "--reason", "r")
    assert production.returncode == 2 and "not a shadow" in production.stderr
    shadow_url = pg_dbs.fresh()
    shadow = env_for(MSGX_DB_URL=shadow_url, MSGX_MODE="shadow")
    missing = msgx(shadow, "shadow", "start-from", str(first + 1000), "--operator", "ops.wang", "--reason", "r")
    assert missing.returncode == 2 and f"mailbox id {first + 1000} does not exist" in missing.stderr
    for url in (app.settings.db_url, shadow_url):
        engine = make_engine(url)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM operator_audit")).scalar_one() == 0
            assert conn.execute(text("SELECT high_water FROM intake_state")).scalar_one() is None
        engine.dispose()


# --- isolation ---------------------------------------------------------------------------------
def state_checksum(url: str) -> dict[str, str]:
    """Every table of a state database, as a row count and an md5 of all its rows."""
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")]
        return {t: conn.execute(f"SELECT count(*) || ':' || coalesce(md5(string_agg(t::text, ',' "
                                f'ORDER BY t::text)), \'\') FROM "{t}" t').fetchone()[0] for t in tables}


def topic_records(reader, bootstrap: str, topic: str, count: int) -> list[tuple]:
    return [(r.partition, r.offset, r.key, r.value, tuple(sorted(r.headers.items())))
            for r in reader(bootstrap, topic, count)]


def test_ops3_a_shadows_day_leaves_everything_production_owns_unchanged(app, pg_dbs, env_for, own_tansu,
                                                                       own_redis, kafka_reader):
    """OPS-3, D29: production (Kafka on ``msg``/``schd``, Redis on ``flightInfo``) processes, marks and
    delivers a day. A shadow pointed at production's state database is refused at start (exit 2,
    nothing written). A shadow with its own database, topics and Redis key then processes the same
    day from its first id, delivers it and archives it: production's mailbox tables, state
    database (every table), topics (not one record more) and Redis hash stay byte for byte as they
    were, while the shadow's own topics and hash hold the day."""
    _, day = history_then_day(app)
    delivery = {"MSGX_KAFKA_BOOTSTRAP": own_tansu.bootstrap, "MSGX_REDIS_URL": own_redis.url}
    production = env_for(**delivery)
    ok(msgx(production, "pump", "--drain"))
    ok(msgx(production, "dispatch", "--drain"))
    engine = make_engine(app.settings.db_url)
    with engine.connect() as conn:
        sent = dict(conn.execute(text("SELECT topic, count(*) FROM msg_event GROUP BY topic")).fetchall())
        of_day = conn.execute(text(      # the old day's flights (the reference data touches them too) are not
            "SELECT count(*) FROM msg_event WHERE topic = 'msg' AND msg_id >= :first AND flid NOT LIKE 'OLD%'"),
            {"first": day[0]}).scalar_one()                    # the shadow's: it starts after them
    engine.dispose()
    redis = connect(own_redis.url)
    before = {
        "mailbox": mailbox_checksum(app.mailbox.engine),
        "state": state_checksum(app.settings.db_url),
        "msg": topic_records(kafka_reader, own_tansu.bootstrap, "msg", sent["msg"]),
        "schd": topic_records(kafka_reader, own_tansu.bootstrap, "schd", 1),   # to the end: flushes batch
        "redis": (redis.dump("flightInfo"), redis.dump("flightInfo:version")),
    }
    assert len(before["msg"]) == sent["msg"] > 1000 and redis.hlen("flightInfo") > 200

    shadow_settings = {"MSGX_MODE": "shadow", "MSGX_REDIS_KEY": "shadow:flightInfo", **SHADOW_TOPICS, **delivery}
    on_production = msgx(env_for(**shadow_settings), "pump", "--drain")
    assert on_production.returncode == 2, on_production.stderr
    assert "production installation's state database" in on_production.stderr
    assert state_checksum(app.settings.db_url) == before["state"]

    shadow_url = pg_dbs.fresh()
    shadow = env_for(MSGX_DB_URL=shadow_url, **shadow_settings)
    ok(msgx(shadow, "shadow", "start-from", str(day[0]), "--operator", "ops.wang", "--reason", "isolation"))
    ok(msgx(shadow, "pump", "--drain"))
    ok(msgx(shadow, "dispatch", "--drain"))
    assert len(kafka_reader(own_tansu.bootstrap, "shadow-msg", of_day)) == of_day
    assert len(kafka_reader(own_tansu.bootstrap, "shadow-schd", 1)) > 0
    assert redis.hlen("shadow:flightInfo") == redis.hlen("flightInfo") - 2          # all but OLD1, OLD2
    ok(msgx(shadow, "archive", "--older-than", "0s"))      # archiving's removals act on Redis too

    assert mailbox_checksum(app.mailbox.engine) == before["mailbox"]
    assert state_checksum(app.settings.db_url) == before["state"]
    assert topic_records(kafka_reader, own_tansu.bootstrap, "msg", sent["msg"]) == before["msg"]
    assert topic_records(kafka_reader, own_tansu.bootstrap, "schd", 1) == before["schd"]
    assert (redis.dump("flightInfo"), redis.dump("flightInfo:version")) == before["redis"]
    redis.close()
