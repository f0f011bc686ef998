"""Shadow mode (OPS-3, D29): a second installation reads the production mailbox,
processes into its own PostgreSQL exactly as production does, and writes nothing shared.

Everything runs as operators run it (``msgx`` console scripts, ``dagster job execute``) on real
PostgreSQL and MariaDB. The shadow runs first on the fresh mailbox, then production processes the
same rows into a second database; the two states are compared.
"""

from __future__ import annotations

import json
import subprocess

from sqlalchemy import text

from msgx_engine.mailbox.lock import MailboxLock
from tests.builders import envelope, flop, gtdt
from tests.conftest import MSGX_BIN
from tests.dagster_support import job_runner
from tests.pipeline_support import mailbox_checksum
from tests.snapshot_builders import day_package

SHADOW = {"MSGX_MODE": "shadow"}


def msgx(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([MSGX_BIN, *args], env=env, capture_output=True, text=True, timeout=300)


def state_of(url: str) -> dict[str, list]:
    """What processing decided, without the times and ids that differ between two installations."""
    from msgx_engine.db import make_engine

    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return {
                "proc_state": [tuple(r) for r in conn.execute(text(
                    "SELECT msg_id, status, reason, dup_of FROM proc_state ORDER BY msg_id"))],
                "msg_event": [tuple(r) for r in conn.execute(text(
                    "SELECT msg_id, flid, topic, state_version, payload FROM msg_event ORDER BY event_id"))],
                "flight_schd": [tuple(r) for r in conn.execute(text(
                    "SELECT flid, fday, state_version, deleted, last_message_id FROM flight_schd ORDER BY flid"))],
            }
    finally:
        engine.dispose()


def load_mailbox(app) -> list[int]:
    """A small day: a snapshot, updates, a delete, an ignored type, a malformed row, a duplicate."""
    dup = gtdt("SH2", (1, "B1"))
    return app.mailbox.put_many([
        day_package(["SH1", "SH2", "SH3"], day=9),
        gtdt("SH1", (1, "A1"), (2, "A2")),
        dup,
        flop("FDEL", "SH3", "<FDEL/>"),
        envelope("LDM", "NONE", "<LDM/>\n"),
        "<MSG><META>broken",
        dup,
        gtdt("SH9", (1, "Z9")),
    ])


def test_ops3_shadow_leaves_the_mailbox_byte_for_byte_and_matches_production(app, pg_dbs, env_for, mailbox_url):
    """OPS-3, D29: a shadow drain and a shadow request run leave CMINMSGS and COUTMSGS byte for byte
    as they were (no processed mark, no COUTMSGS row; its requests are recorded SHADOW with the body
    it would have sent, its marks SHADOW); the shadow takes no mailbox lock (it runs while
    production's pump holds it); inserting into or recovering from the mailbox is refused (exit 2).
    Production then processes the same rows into its own database: the messages' outcomes, the
    events and the flights are the same in both."""
    ids = load_mailbox(app)
    shadow_url = pg_dbs.fresh()
    shadow = env_for(MSGX_DB_URL=shadow_url, **SHADOW)
    before = mailbox_checksum(app.mailbox.engine)

    production_lock = MailboxLock(mailbox_url)
    production_lock.acquire()                      # a production pump holds the mailbox
    try:
        drained = msgx(shadow, "pump", "--drain")
    finally:
        production_lock.dispose()
    assert drained.returncode == 0, drained.stderr
    assert "mode=shadow" in msgx({**shadow, "MSGX_LOG_LEVEL": "INFO"}, "pump", "--drain").stderr
    registered = msgx(shadow, "request", "rqfd", "--start", "2026-09-10 00:00", "--end", "2026-09-10 23:59")
    assert registered.returncode == 0, registered.stderr
    tracked = msgx(shadow, "request", "track")
    assert tracked.returncode == 0, tracked.stderr
    assert json.loads(tracked.stdout)["sent"] == [] and len(json.loads(tracked.stdout)["shadowed"]) == 1
    refused = [msgx(shadow, "mailbox", "put", str(MSGX_BIN)), msgx(shadow, "recover")]
    assert [p.returncode for p in refused] == [2, 2]
    assert "never writes the mailbox" in refused[0].stderr and "shadow" in refused[1].stderr
    assert mailbox_checksum(app.mailbox.engine) == before, "the shadow wrote to the mailbox"
    assert all(v is None for v in app.mailbox.processed_at(ids).values())

    from msgx_engine.db import make_engine

    engine = make_engine(shadow_url)
    with engine.connect() as conn:
        marks = conn.execute(text("SELECT DISTINCT status FROM backfill_todo")).scalars().all()
        [(status, coutmsgs_id, detail)] = conn.execute(text(
            "SELECT status, coutmsgs_id, detail FROM req_track")).fetchall()
    engine.dispose()
    assert marks == ["SHADOW"]
    assert (status, coutmsgs_id) == ("SHADOW", None)
    assert "not written to COUTMSGS" in detail and "<TYPE>RQFD</TYPE>" in detail

    production = msgx(env_for(), "pump", "--drain")
    assert production.returncode == 0, production.stderr
    assert all(v is not None for v in app.mailbox.processed_at(ids).values())
    shadow_state, production_state = state_of(shadow_url), state_of(app.settings.db_url)
    assert shadow_state == production_state
    statuses = {row[1] for row in shadow_state["proc_state"]}
    assert statuses == {"SUCCEEDED", "SKIPPED", "DEAD"} and len(shadow_state["proc_state"]) == len(ids)
    assert msgx(shadow, "flights").stdout == msgx(env_for(), "flights").stdout


def test_ops3_shadow_follows_production_by_id_not_by_mark(app, pg_dbs, env_for):
    """OPS-3 "input by watermark": production processes (and marks) rows before the shadow sees
    them; the shadow still processes every row above its own high-water mark, in id order, and
    does not mistake production's marks for a restored state database (no refusal)."""
    shadow_url = pg_dbs.fresh()
    shadow = env_for(MSGX_DB_URL=shadow_url, **SHADOW)
    first = app.mailbox.put(gtdt("SW1", (1, "A1")))
    assert msgx(shadow, "pump", "--drain").returncode == 0          # adopts the mailbox at id 0
    later = app.mailbox.put_many([gtdt("SW1", (1, "B1")), gtdt("SW2", (1, "C1"))])
    done = msgx(env_for(), "pump", "--drain")
    assert done.returncode == 0, done.stderr
    assert all(v is not None for v in app.mailbox.processed_at([first, *later]).values())
    followed = msgx(shadow, "pump", "--drain")
    assert followed.returncode == 0, followed.stderr
    assert state_of(shadow_url) == state_of(app.settings.db_url)


def test_ops3_shadow_publishes_only_to_its_own_topics(app, pg_dbs, env_for, own_tansu, kafka_reader):
    """OPS-3: with Kafka configured a shadow refuses the production topic names (exit 2, nothing
    processed); with topics of its own its events go there, and the (private) broker ends up with
    no production topic at all: nothing was ever published to ``msg`` or ``schd``."""
    from confluent_kafka.admin import AdminClient

    app.mailbox.put(gtdt("SK1", (1, "A1")))
    shadow_url = pg_dbs.fresh()
    base = env_for(MSGX_DB_URL=shadow_url, MSGX_KAFKA_BOOTSTRAP=own_tansu.bootstrap, **SHADOW)
    refused = msgx(base, "pump", "--drain")
    assert refused.returncode == 2 and "MSGX_TOPIC_MSG='msg'" in refused.stderr
    assert state_of(shadow_url)["proc_state"] == []

    topics = {"MSGX_TOPIC_MSG": "shadow-msg", "MSGX_TOPIC_SCHD": "shadow-schd"}
    own = {**base, **topics}
    assert msgx(own, "pump", "--drain").returncode == 0
    sent = msgx(own, "dispatch", "--drain")
    assert sent.returncode == 0, sent.stderr
    [record] = kafka_reader(own_tansu.bootstrap, "shadow-msg", 1)
    assert record.key == "SK1"
    assert len(kafka_reader(own_tansu.bootstrap, "shadow-schd", 1)) == 1
    existing = set(AdminClient({"bootstrap.servers": own_tansu.bootstrap}).list_topics(timeout=10).topics)
    assert not existing & {"msg", "schd"}, f"a production topic exists on the broker: {existing}"


def test_ops3_dagster_runs_carry_the_mode_tag(app, pg_dbs, env_for, tmp_path):
    """OPS-3: every run says which mode it ran in: the ``msgx/mode`` run tag (shadow here), however it
    was launched; the shadow pump_job leaves the mailbox unmarked."""
    m = app.mailbox.put(gtdt("SD1", (1, "A1")))
    shadow_url = pg_dbs.fresh()
    run = job_runner(lambda **extra: env_for(MSGX_DB_URL=shadow_url, **SHADOW, **extra), tmp_path)
    done = run("pump_job")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    import dagster as dg

    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        [record] = instance.get_run_records()
    assert record.dagster_run.tags.get("msgx/mode") == "shadow"
    assert app.mailbox.processed_at([m])[m] is None
    assert state_of(shadow_url)["proc_state"] == [(m, "SUCCEEDED", None, None)]
