"""``msgx status`` (OPS-2): the operator's one screen, run as the real command
against real PostgreSQL and MariaDB, the messages processed by the real pump.

Exit codes: 0 healthy, 1 a check fails (a dead letter's warning included), 2 the state database
cannot be read (quickly, with a one-line reason) or its schema is behind; an unreachable mailbox
alone is a failing check (1). The JSON carries the same content as the text."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from snapshot_builders import dnld, fltr, sodt
from sqlalchemy import text

from msgx_engine.clock import ManualClock
from msgx_engine.db import make_engine
from msgx_engine.pipeline.pump import PumpOptions
from msgx_engine.sis.times import LOCAL_TZ
from msgx_engine.store import migrate

TOP_KEYS = {"status", "exit_code", "now", "mode", "cutover", "checks", "backlog", "pump", "dead_letters", "outbox",
            "snapshots", "projection"}
CHECK_NAMES = ("backlog_age", "dead_letters", "delivery_backlog", "backfill_lag", "projection_drift",
               "unsupported_types", "request_timeouts", "pipeline_liveness", "stand_mapping")


@pytest.fixture
def clock() -> ManualClock:
    """Registration times at the database's clock, which every age in the report is measured against."""
    return ManualClock(datetime.now(UTC))


def status(env: dict[str, str], *args: str) -> tuple[int, str, str, float]:
    """``msgx status ARGS`` as a subprocess: (exit code, stdout, stderr, seconds taken)."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "msgx_engine.cli", "status", *args], env={**env, "COLUMNS": "120"},
                          capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started


def drain(app, *bodies: str) -> list[int]:
    ids = [app.mailbox.put(b) for b in bodies]
    app.pump(PumpOptions(exit_when_waiting=True, idle_poll_s=0.01)).run()
    return ids


def load_stand_mapping(app, samples: Path) -> None:
    """The AODB's airbridge table (ABDG DNLD sample) through the pump: the stand mapping is known."""
    drain(app, (samples / "ABDG" / "01_DNLD.xml").read_text(encoding="utf-8"))


def airport_today() -> datetime:
    return datetime.now(LOCAL_TZ)


def test_healthy_exits_0_and_the_json_has_every_section(app, env_for, samples):
    """OPS-2: after a snapshot of today and the stand mapping went through the pump, every check
    passes: exit 0, "healthy" in the text; the JSON has the documented keys, every check OK, the
    pump's heartbeat, and today's snapshot."""
    load_stand_mapping(app, samples)
    today = airport_today()
    (snapshot_id,) = drain(app, dnld(fltr("S1", sodt(today.day, today.month, today.year % 100)),
                                     fltr("S2", sodt(today.day, today.month, today.year % 100), stnd="505")))

    code, out, err, _ = status(env_for())
    assert code == 0, out + err
    assert "healthy: all 9 checks pass" in out.splitlines()[0]
    assert re.search(rf"^\s+{today.date().isoformat()}\s+{snapshot_id}\s+DNLD\b", out, flags=re.M), out

    code, out, err, _ = status(env_for(), "--json")
    doc = json.loads(out)
    assert code == 0 and set(doc) == TOP_KEYS
    assert (doc["status"], doc["exit_code"], doc["mode"]) == ("ok", 0, "production")
    assert [c["name"] for c in doc["checks"]] == list(CHECK_NAMES)
    assert {c["state"] for c in doc["checks"]} == {"OK"} and all(c["first_command"] is None for c in doc["checks"])
    assert set(doc["checks"][0]) == {"name", "state", "severity", "cause", "value", "first_command", "runbook"}
    assert doc["backlog"]["mailbox_up"] is True and doc["backlog"]["unregistered_rows"] == 0
    assert doc["backlog"]["open_messages"] == 0 and doc["backlog"]["mailbox_marks_pending"] == 0
    assert doc["pump"]["last_heartbeat"] is not None and doc["pump"]["lock_held"] is False
    assert doc["dead_letters"] == {"waiting": 0, "oldest": []}
    (day,) = [d for d in doc["snapshots"]["days"] if d["msg_id"] == snapshot_id]
    assert (day["day"], day["styp"], day["flights"], day["written"]) == (today.date().isoformat(), "DNLD", 2, 2)
    assert doc["snapshots"]["live_since"] == (today.date() - timedelta(days=1)).isoformat()
    assert doc["projection"] == {"configured": False, "measured": False, "differing_flights": None, "error": None}
    # no Kafka here: the snapshot's events wait in the outbox, per topic, as msg_event says
    with app.engine.connect() as conn:
        waiting = dict(conn.execute(text("SELECT topic, count(*) FROM msg_event WHERE sent_at IS NULL "
                                         "AND released_at IS NOT NULL GROUP BY topic")).all())
    assert waiting and {t["topic"]: t["undelivered"] for t in doc["outbox"]} == waiting
    assert all(t["dead"] == 0 and 0 <= t["oldest_undelivered_age_s"] < 120 for t in doc["outbox"])


def test_a_dead_letter_exits_1_naming_it_with_its_reason(app, env_for, samples):
    """A malformed message ends DEAD: exit 1; the text names its mailbox id and reason in the dead
    letters and the dead_letters check is a WARN with its first command; the JSON says the same
    (the same checks and states as the text's table, the same dead letter, the same backlog)."""
    load_stand_mapping(app, samples)
    (dead_id,) = drain(app, "<MSG><META>")

    code, text, err, _ = status(env_for())
    assert code == 1, text + err
    assert "NOT HEALTHY: 1 warning (dead_letters)" in text.splitlines()[0]
    row = re.search(rf"^\s+{dead_id}\s+(\S+)\s+malformed\s", text, flags=re.M)
    assert row, text
    assert "first: msgx replay --status DEAD" in text and "see docs/runbook.md#dead-letters" in text
    assert f"msgx acknowledge {dead_id} --operator NAME --reason TEXT" in text

    code, out, err, _ = status(env_for(), "--json")
    doc = json.loads(out)
    assert code == 1 and (doc["status"], doc["exit_code"]) == ("failing", 1)
    assert doc["dead_letters"]["waiting"] == 1
    (dead,) = doc["dead_letters"]["oldest"]
    assert (dead["msg_id"], dead["reason"]) == (dead_id, "malformed") and dead["error"]
    by_name = {c["name"]: c for c in doc["checks"]}
    assert (by_name["dead_letters"]["state"], by_name["dead_letters"]["first_command"]) == (
        "WARN", "msgx replay --status DEAD")
    assert by_name["dead_letters"]["runbook"] == "docs/runbook.md#dead-letters"
    # the text's check table and the JSON agree, check by check
    table = dict(re.findall(r"^  (\w+)\s+(OK|WARN|FAILING)\s", text, flags=re.M))
    assert table == {c["name"]: c["state"] for c in doc["checks"]}
    assert re.search(rf"open messages \(registered\)\s+{doc['backlog']['open_messages']}\b", text)
    assert f"DEAD LETTERS: {doc['dead_letters']['waiting']} waiting" in text


def test_state_database_unreachable_exits_2_quickly_with_one_line(env_for):
    """A state database URL to a closed port: exit 2 within seconds, one line naming the cause on
    stderr (no traceback); with --json a document saying so."""
    env = env_for(MSGX_DB_URL="postgresql+psycopg://postgres@127.0.0.1:1/none")
    code, out, err, took = status(env)
    assert code == 2 and took < 15, (code, took)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("msgx status: state database unreachable: OperationalError")
    assert "Traceback" not in err and out == ""
    code, out, _, _ = status(env, "--json")
    doc = json.loads(out)
    assert code == 2 and doc["status"] == "unreachable" and doc["exit_code"] == 2
    assert doc["reason"].startswith("state database unreachable")


def test_state_schema_behind_exits_2_saying_to_upgrade(pg_dbs, env_for):
    """A state database one migration behind the code: exit 2, "run `msgx db upgrade`"."""
    url = pg_dbs.fresh(migrated=False)
    engine = make_engine(url)
    migrate.upgrade(engine, "0013")
    engine.dispose()
    code, out, err, _ = status(env_for(MSGX_DB_URL=url))
    assert code == 2, out + err
    assert "schema is at revision '0013'" in err and "msgx db upgrade" in err


def test_mailbox_unreachable_alone_is_a_failing_check(app, env_for, samples):
    """The mailbox at a closed port while the state database answers: exit 1 (not 2); the
    liveness check fails saying the mailbox cannot be read and points to the runbook's "Mailbox
    unreachable" section and a query of the mailbox (not "Pipeline stalled"), and the backlog says it
    did not answer."""
    load_stand_mapping(app, samples)
    code, out, err, took = status(env_for(MSGX_MAILBOX_URL="mysql+pymysql://root@127.0.0.1:1/none"), "--json")
    assert code == 1, out + err
    doc = json.loads(out)
    liveness = {c["name"]: c for c in doc["checks"]}["pipeline_liveness"]
    assert liveness["state"] == "FAILING" and "mailbox cannot be read" in liveness["cause"]
    assert liveness["runbook"] == "docs/runbook.md#mailbox-unreachable"
    assert liveness["first_command"].startswith("mysql -h MAILBOX_HOST")
    assert doc["backlog"]["mailbox_up"] is False and doc["backlog"]["unregistered_rows"] is None
    assert doc["backlog"]["mailbox_error"]
    assert took < 20


def test_a_configured_redis_that_does_not_answer_is_drift_not_measured(env_for):
    """With MSGX_REDIS_URL set, status compares the projection itself; a Redis that refuses makes the
    projection_drift check fail ("not measured") instead of passing as "not configured"."""
    code, out, err, _ = status(env_for(MSGX_REDIS_URL="redis://127.0.0.1:1/0"), "--json")
    assert code == 1, out + err
    doc = json.loads(out)
    assert doc["projection"]["configured"] is True and doc["projection"]["measured"] is False
    assert "ConnectionError" in doc["projection"]["error"]
    drift = {c["name"]: c for c in doc["checks"]}["projection_drift"]
    assert drift["state"] == "FAILING" and "not measured" in drift["cause"]
    assert drift["first_command"] == "dagster job launch -w /etc/msgx/workspace.yaml -j projection_rebuild_job"


def test_an_undecodable_dead_letter_shows_the_type_its_mailbox_row_states(app, env_for):
    """OPS-2: a body that cannot be decoded leaves msgx no TYPE/STYP of its own; `msgx status` takes
    them from the mailbox row's TYPE and SUBTYPE columns (filled as the AODB adapter does), so the
    dead letter shows FLOP/CNCL rather than ?/?."""
    [broken] = drain(app, "<MSG><META><SNDR>AODB</SNDR><TYPE>FLOP</TYPE><STYP>CNCL</STYP></META><FLOP>")
    assert app.mailbox.kinds([broken]) == {broken: ("FLOP", "CNCL")}
    code, out, err, _ = status(env_for(), "--json")
    assert code == 1, out + err
    [letter] = json.loads(out)["dead_letters"]["oldest"]
    assert (letter["msg_id"], letter["type"], letter["styp"], letter["reason"]) == (broken, "FLOP", "CNCL", "malformed")
