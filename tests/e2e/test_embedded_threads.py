"""The embedded PostgreSQL is started once per process, whatever the threads (OPS-2): the demo's
sensors evaluate in threads of one daemon process, and two of them starting the server at once
hit the wheel's process-wide file lock ("Unable to release an unaquired lock"), which made one
health tick report every check red. Eight threads start it at the same moment on a fresh
``MSGX_HOME``: every one gets the same server, none fails, the wheel's server object is made
once, and the databases the commands use exist."""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path

import psycopg
import pytest

from msgx_engine import embedded

THREADS = 8


@pytest.fixture
def home():
    """A fresh MSGX_HOME directly under the temp folder (short: the server's unix socket lives in
    it; pytest's own folder is not reachable by the server's system user when running as root)."""
    path = Path(tempfile.mkdtemp(prefix="msgx-threads-"))
    yield path
    embedded.stop(path)
    shutil.rmtree(path, ignore_errors=True)


def test_threads_starting_the_embedded_server_at_once_share_one_start(home: Path, monkeypatch):
    """OPS-2: concurrent `embedded_urls` calls (what each Dagster sensor's settings do) start the
    server once and all answer with the same URLs; a later call finds it without starting again."""
    made: list[object] = []
    real = embedded._server

    def counting(h: Path):
        made.append(h)
        return real(h)

    monkeypatch.setattr(embedded, "_server", counting)
    barrier = threading.Barrier(THREADS)
    urls: list[tuple[str, str]] = []
    errors: list[BaseException] = []

    def start() -> None:
        barrier.wait()
        try:
            urls.append(embedded.embedded_urls(home))
        except BaseException as exc:  # noqa: BLE001 - every failure of a thread is the finding
            errors.append(exc)

    workers = [threading.Thread(target=start) for _ in range(THREADS)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(300)
    assert not errors, errors
    assert len(urls) == THREADS and len(set(urls)) == 1
    assert len(made) == 1, f"the server was started {len(made)} times in one process"
    assert embedded.embedded_urls(home) == urls[0] and len(made) == 1
    server = embedded.start(home)
    with psycopg.connect(server.conninfo(embedded.STATE_DB)) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == (embedded.STATE_DB,)
