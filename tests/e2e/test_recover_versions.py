"""``msgx recover`` after a restore from a backup older than what was published (decision O19): the
replay and every change after it reach a consumer that follows docs/delivery.md, because recovery
reads the production topics first and continues above them; topics that cannot be read refuse it.

Everything runs as an operator runs it: ``msgx`` commands (in process) on real PostgreSQL, MariaDB
and the Kafka-wire broker (topics of this test's own). The backup is a copy of the state database
taken while it runs (a template copy, as ``pg_dump`` would give it; the drill with the real tools
is tests/e2e/test_recovery_drill.py).
"""

from __future__ import annotations

import json
import uuid

from tests.builders import gtdt
from tests.cutover_support import Follower, ok, scalar
from tests.e2e.test_recovery_drill import copy_of
from tests.e2e.test_shadow_start import state_checksum


def kafka_env(monkeypatch, bootstrap: str) -> dict[str, str]:
    tag = uuid.uuid4().hex[:8]
    env = {"MSGX_KAFKA_BOOTSTRAP": bootstrap, "MSGX_TOPIC_MSG": f"rec_msg_{tag}",
           "MSGX_TOPIC_SCHD": f"rec_schd_{tag}"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


def test_recover_from_an_older_backup_publishes_above_what_consumers_hold(
        app, pg_dbs, cli_run, monkeypatch, kafka_bootstrap, kafka_reader):
    """O19, OPS-4 (state recovery), US-07 AC3: flights DR0-DR3 are published and the state database
    is backed up. Then writes that rolled back draw event ids (as a crash before a commit or a
    retried transaction does: a sequence never goes back), and DR1, DR2 and DR9 change and are
    published. The database is lost and restored from the backup, which counts
    event ids from before all that. ``msgx recover --apply`` replays the lost rows; a new change of
    DR1 follows. A consumer that follows docs/delivery.md literally drops nothing on either topic
    and ends holding every current flight's whole state as the restored installation has it."""
    env = kafka_env(monkeypatch, kafka_bootstrap)
    put = app.mailbox.put
    for i in range(4):
        put(gtdt(f"DR{i}", (1, f"A{i}")))
    ok(cli_run("pump", "--drain"))
    ok(cli_run("dispatch", "--drain"))
    app.dispose()
    backup = copy_of(pg_dbs, app.settings.db_url)

    put(gtdt("DR1", (1, "B1")))
    put(gtdt("DR2", (1, "B2")))
    put(gtdt("DR9", (1, "C9")))
    scalar(app.settings.db_url, "SELECT max(setval(pg_get_serial_sequence('msg_event', 'event_id'), "
           "nextval(pg_get_serial_sequence('msg_event', 'event_id')) + 20))")   # ids drawn by writes rolled back
    ok(cli_run("pump", "--drain"))
    ok(cli_run("dispatch", "--drain"))

    monkeypatch.setenv("MSGX_DB_URL", backup)          # the database is lost; the backup is restored
    out = ok(cli_run("recover", "--apply", "--operator", "ops", "--reason", "restored from the nightly backup"))
    assert out.startswith("recovered 3 message(s)")
    versions = json.loads(out.splitlines()[1])["versions"]
    assert versions["raised"] == 2 and versions["floors"] == 1       # DR1, DR2 stored; DR9 only after the backup
    put(gtdt("DR1", (1, "Z1")))
    ok(cli_run("pump", "--drain"))
    ok(cli_run("dispatch", "--drain"))

    follower = Follower().consume(kafka_reader, env, 1)
    assert follower.lost == []
    current = {d["FLID"]: d for d in json.loads(ok(cli_run("flights")))}
    assert {f: follower.documents.get(f) for f in current} == current and len(current) == 5


def test_recover_is_refused_when_the_topics_cannot_be_read(app, pg_dbs, cli_run, monkeypatch):
    """O19, OPS-4: a restored database with lost rows, and Kafka configured but not answering: there is
    no other installation to ask, so ``msgx recover --apply`` refuses (exit 2) with the reason in
    the operator's words, and nothing changes (every table of the state database as it was)."""
    put = app.mailbox.put
    put(gtdt("RF1", (1, "A1")))
    ok(cli_run("pump", "--drain"))
    app.dispose()
    backup = copy_of(pg_dbs, app.settings.db_url)
    put(gtdt("RF1", (1, "B1")))
    ok(cli_run("pump", "--drain"))

    monkeypatch.setenv("MSGX_DB_URL", backup)
    kafka_env(monkeypatch, "127.0.0.1:1")               # nothing listens there
    before = state_checksum(backup)
    code, _, err = cli_run("recover", "--apply", "--operator", "ops", "--reason", "restored")
    assert code == 2, err
    assert "refused, nothing changed" in err and "Kafka broker at 127.0.0.1:1" in err
    assert "consumers already have" in err
    assert state_checksum(backup) == before
