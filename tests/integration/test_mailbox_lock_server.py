"""The mailbox lock on real servers: a plain MariaDB takes it, a Galera cluster node is refused at
start with the operator's message (OPS-1, PRE-5).

The Galera node is real: a private one-node cluster (``wsrep_on=ON``, the Galera provider loaded).
MariaDB 10.11 there still grants ``GET_LOCK``, but on that node only: a second installation on
another node would get it too, which is why the lock refuses such a server before asking for it.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from sqlalchemy import text

from msgx_engine.mailbox.adapter import Mailbox
from msgx_engine.mailbox.lock import MailboxLock, wsrep_on
from msgx_engine.store.tables import proc_state
from tests.builders import gtdt
from tests.conftest import MSGX_BIN
from tests.private_servers import GALERA_PROVIDER, PrivateMariaDB, galera_options


def test_plain_mariadb_takes_the_mailbox_lock(mailbox_url):
    """OPS-1: MariaDB without a cluster answers wsrep_on=OFF, and the pump's lock is taken and seen
    held from another session."""
    lock = MailboxLock(mailbox_url)
    try:
        with lock.engine.connect() as conn:
            assert not wsrep_on(conn)
        lock.start()
        assert lock.held
        with Mailbox(mailbox_url).engine.connect() as other:
            assert other.execute(text("SELECT IS_USED_LOCK(:n)"), {"n": lock.name}).scalar() is not None
    finally:
        lock.dispose()


@pytest.fixture
def galera_node(tmp_path):
    if shutil.which("mariadbd") is None or not GALERA_PROVIDER.exists():
        pytest.fail("mariadbd or the Galera provider (galera-4) is not installed", pytrace=False)
    node = PrivateMariaDB(tmp_path / "galera", options=galera_options())
    node.start()
    yield node
    node.stop()


def test_pump_on_a_galera_mailbox_refuses_to_start(galera_node, pg_url, env_for, app):
    """OPS-1, PRE-5: ``msgx pump`` pointed at a Galera node exits 2 ("configuration refused") with
    the message naming the cluster and what to point MSGX_MAILBOX_URL at; it registers nothing and
    leaves no lock behind. Without the check the lock was taken on that node only, or, where
    GET_LOCK errors, the error was taken for an unreachable mailbox and the pump went on unlocked."""
    url = galera_node.database("mbx")
    mailbox = Mailbox(url)
    mailbox.init()
    mailbox.put(gtdt("GL1", (1, "A1")))
    with mailbox.engine.connect() as conn:
        assert wsrep_on(conn)
    done = subprocess.run([MSGX_BIN, "pump", "--drain"], env=env_for(MSGX_MAILBOX_URL=url),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "configuration refused" in done.stderr and "Galera cluster (wsrep_on=ON)" in done.stderr
    assert "MSGX_MAILBOX_URL" in done.stderr and "Traceback" not in done.stderr
    with app.engine.connect() as conn:
        assert conn.execute(proc_state.select()).fetchall() == []
    with mailbox.engine.connect() as conn:
        assert conn.execute(text("SELECT IS_USED_LOCK('msgx-pump:mbx')")).scalar() is None
    mailbox.dispose()
