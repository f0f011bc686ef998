"""The CLI and the embedded default (and 7; DESIGN §4)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from msgx_engine.mailbox.adapter import Mailbox, MailboxError

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]


def test_mailbox_init_refuses_a_database_with_other_tables(mysql_dbs):
    """`msgx mailbox init` is for test/demo databases only: a database holding anything else is refused."""
    url = mysql_dbs.fresh(with_tables=False)
    mb = Mailbox(url)
    try:
        with mb.engine.connect() as conn:
            conn.execute(text("CREATE TABLE production_stuff (id int)"))
        with pytest.raises(MailboxError, match="production_stuff"):
            mb.init()
    finally:
        mb.dispose()


def test_cli_put_inserts_like_the_aodb_adapter_and_pump_drains(settings, env_for, samples):
    """`msgx mailbox put` sets status VALID and a received time; `msgx pump --drain` exits 0 with a
    per-status table."""
    env = env_for()
    files = [str(samples / "GTDT/01_GTDT.xml"), str(samples / "APPT/01_APPT.xml")]
    put = subprocess.run([str(BIN / "msgx"), "mailbox", "put", *files], env=env, capture_output=True, text=True)
    assert put.returncode == 0, put.stderr
    mb = Mailbox(settings.mailbox_url)
    with mb.engine.connect() as conn:
        rows = conn.execute(text("SELECT CMINMSGS_STATUS, CMINMSGS_DATE_RECEIVED IS NOT NULL, "
                                 "CMINMSGS_DATE_PROCESSED FROM cminmsgs ORDER BY CMINMSGS_ID")).fetchall()
    assert [tuple(r) for r in rows] == [("VALID", 1, None), ("VALID", 1, None)]
    pump = subprocess.run([str(BIN / "msgx"), "pump", "--drain"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert pump.returncode == 0, pump.stderr
    assert "SUCCEEDED" in pump.stdout and "processed 2" in pump.stdout
    assert all(v is not None for v in mb.processed_at([1, 2]).values())
    mb.dispose()
