"""The backup and restore drill of the runbook, rehearsed with the real tools: ``pg_dump`` of msgx's
PostgreSQL, more traffic, the database lost (dropped), ``pg_restore`` into a new database, the pump
refused until ``msgx recover --apply`` replays what was processed since the dump, and
``msgx compare`` against a copy of the state just before the loss: 0 unexplained differences."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import psycopg
import pytest

from tests.builders import gtdt
from tests.conftest import PG_ADMIN
from tests.recovery import recovery


def plain(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed (PostgreSQL 15 client tools)", pytrace=False)
    return path


def drop(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
        conn.execute(f'DROP DATABASE "{name}"')


def copy_of(pg_dbs, url: str) -> str:
    """The reference for the end: a copy of the state database just before it is lost."""
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
    return pg_dbs.create(f"{name}_preloss", template=name)


def test_backup_restore_and_recover_end_equal_to_the_state_before_the_loss(settings, app, pg_dbs, cli_run,
                                                                           monkeypatch, tmp_path: Path):
    """OPS-4 (state recovery): the runbook's drill. Every step is the command an operator runs."""
    put = app.mailbox.put
    for i in range(4):
        put(gtdt(f"DR{i}", (1, f"A{i}")))
    assert cli_run("pump", "--drain")[0] == 0
    dump = tmp_path / "msgx.dump"
    subprocess.run([tool("pg_dump"), "--format=custom", "--file", str(dump), "--dbname", plain(settings.db_url)],
                   check=True, capture_output=True, timeout=120)

    later = [put(gtdt("DR1", (1, "B1"))), put(gtdt("DR2", (1, "B2"))), put(gtdt("DR9", (1, "C9")))]
    assert cli_run("pump", "--drain")[0] == 0
    app.dispose()
    reference = copy_of(pg_dbs, settings.db_url)
    drop(settings.db_url)                                         # the database is lost

    restored = pg_dbs.fresh(migrated=False)
    subprocess.run([tool("pg_restore"), "--no-owner", "--dbname", plain(restored), str(dump)],
                   check=True, capture_output=True, timeout=120)
    monkeypatch.setenv("MSGX_DB_URL", restored)

    code, _, err = cli_run("pump", "--drain")
    assert code == 4 and "msgx recover" in err                    # behind the mailbox: refused, nothing applied
    code, out, _ = cli_run("recover")
    assert code == 0 and "msgx recover --apply --operator NAME --reason TEXT" in out
    applied = time.monotonic()
    code, out, err = cli_run("recover", "--apply", "--operator", "ops", "--reason", "restored from the nightly dump")
    recovery("the state database lost and restored from a backup", applied,
             "msgx recover --apply started -> it ended, the later rows replayed")
    assert code == 0, err
    assert out.startswith(f"recovered {len(later)} message(s)")
    assert json.loads(out.splitlines()[1])["statuses"] == {"SUCCEEDED": len(later)}

    code, out, err = cli_run("compare", "--against", reference, "--json")
    assert code == 0, (out, err)
    report = json.loads(out)
    assert report["differences"]["unexplained"] == 0 and report["flights"]["compared"] == 5
    assert report["flights"]["equal"] == 5
    newest = put(gtdt("DR0", (1, "Z0")))                          # and the pump goes on
    assert cli_run("pump", "--drain")[0] == 0
    code, out, _ = cli_run("compare", "--against", reference, "--json")
    assert code == 1 and json.loads(out)["unexplained_examples"][0]["flid"] == "DR0"
    assert newest > later[-1]
