"""A mailbox on a Galera cluster node is refused clearly at start, never a quiet retry (OPS-1, PRE-5).

Only the server's answer to the variable lookup is faked: a connection that answers
``SHOW VARIABLES LIKE 'wsrep_on'`` and records every other statement it is sent. The real MariaDB
(no cluster) passing is checked in tests/integration/test_mailbox_lock_server.py.
"""

from __future__ import annotations

import pytest

from msgx_engine.config import ConfigError
from msgx_engine.mailbox.lock import GALERA_REFUSAL, MailboxLock, MailboxLockUnsupported


class _Answer:
    def __init__(self, row: tuple[str, str] | None) -> None:
        self.row = row

    def first(self) -> tuple[str, str] | None:
        return self.row

    def scalar(self) -> object:
        return 1


class _Server:
    """Answers the variable lookup with ``wsrep_on``; anything else is recorded (and answered 1)."""

    def __init__(self, wsrep_on: str | None) -> None:
        self.wsrep_on = wsrep_on
        self.sent: list[str] = []
        self.closed = 0

    def connect(self) -> _Server:
        return self

    def execute(self, statement, params=None) -> _Answer:
        sql = str(statement)
        if sql == "SHOW VARIABLES LIKE 'wsrep_on'":
            return _Answer(None if self.wsrep_on is None else ("wsrep_on", self.wsrep_on))
        self.sent.append(sql)
        return _Answer(None)

    def close(self) -> None:
        self.closed += 1


def _lock(server: _Server) -> MailboxLock:
    lock = MailboxLock("mysql+pymysql://msgx@mailbox.invalid/mbx")
    lock.engine = server       # type: ignore[assignment]
    return lock


@pytest.mark.parametrize("value", ["ON", "on", "1"])
def test_galera_node_is_refused_before_any_lock_is_asked_for(value):
    """OPS-1: wsrep_on=ON: the lock is refused with the operator's message (a configuration error,
    so ``msgx pump`` exits 2, not the busy exit a supervisor retries), GET_LOCK is never sent and
    the connection is closed."""
    server = _Server(value)
    lock = _lock(server)
    with pytest.raises(MailboxLockUnsupported) as refused:
        lock.acquire()
    assert isinstance(refused.value, ConfigError)
    assert str(refused.value) == GALERA_REFUSAL
    assert "MSGX_MAILBOX_URL" in GALERA_REFUSAL and "Galera" in GALERA_REFUSAL
    assert server.sent == [] and server.closed == 1 and not lock.held


def test_start_and_keep_do_not_take_a_galera_refusal_for_an_outage():
    """OPS-1: at start and on a re-take after a lost connection (a failover onto a Galera node), the
    refusal propagates; it is not logged as "mailbox unreachable" and retried while the pump goes
    on without the lock."""
    lock = _lock(_Server("ON"))
    with pytest.raises(MailboxLockUnsupported):
        lock.start()
    with pytest.raises(MailboxLockUnsupported):
        lock.keep()


@pytest.mark.parametrize("value", ["OFF", None])
def test_no_cluster_takes_the_lock(value):
    """OPS-1: MariaDB without a cluster (wsrep_on=OFF) or MySQL (no such variable): GET_LOCK is asked for."""
    server = _Server(value)
    lock = _lock(server)
    lock.acquire()
    assert lock.held and any("GET_LOCK" in s for s in server.sent)
