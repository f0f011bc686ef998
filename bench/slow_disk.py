"""Run a benchmark against a PostgreSQL whose disk flushes are slow (latency).

The machines these figures come from flush an 8 kB page in 0.07-0.12 ms; the machine the speed targets'
latency misses came from flushed in about 4 ms. To see what a slow disk does to a figure on any
machine, this script starts a private PostgreSQL cluster (``initdb`` in a temporary folder, a
free loopback port, the shared server's ``autovacuum``, ``shared_buffers``, ``max_wal_size`` and
``synchronous_commit``) with ``bench/slow_sync.c`` preloaded: every ``fsync``/``fdatasync`` of
the server takes ``--flush-ms`` longer, so each commit waits as it would on such a disk, while
every read and write stays as fast as this machine's. It prints what one commit then takes, on
the shared server and on the slow one, runs the command with ``MSGX_TEST_PG`` pointing at the
slow cluster (every benchmark takes its PostgreSQL from there), then stops the cluster and
removes its folder, whatever the command did. MariaDB, Redis and the broker stay the shared ones.

Usage: ``.venv/bin/python bench/slow_disk.py [--flush-ms 4] -- COMMAND [ARG ...]``, e.g.
``.venv/bin/python bench/slow_disk.py --flush-ms 4 -- .venv/bin/python bench/bench_latency.py
--settle 65 --stages``. Needs ``gcc`` and, when run as root, the ``postgres`` user (as the tests'
private clusters do). Exit status: the command's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from bench_pump import PG as SHARED_PG  # noqa: E402
from private_servers import PrivatePostgres, private_postgres_root  # noqa: E402

SHIM = HERE / "slow_sync.c"


def build_shim(folder: Path) -> Path:
    """Compile the flush-slowing library into ``folder`` (which the postgres user can read)."""
    out = folder / "slow_sync.so"
    subprocess.run([os.environ.get("CC", "gcc"), "-shared", "-fPIC", "-O2", "-o", str(out), str(SHIM), "-ldl"],
                   check=True)
    out.chmod(0o755)
    return out


def shared_settings() -> dict[str, str]:
    """The shared server's settings that move a benchmark's figures, so that the slow cluster
    differs from it in its flushes only."""
    with psycopg.connect(SHARED_PG) as conn:
        return dict(conn.execute("SELECT name, current_setting(name) FROM pg_settings WHERE name IN "
                                 "('autovacuum', 'shared_buffers', 'max_wal_size', 'synchronous_commit')").fetchall())


def commit_ms(dsn: str, commits: int = 100) -> float:
    """The median wall time of a one-row insert and its commit: the flush a message's
    transaction waits for."""
    with psycopg.connect(dsn) as conn:
        conn.execute("DROP TABLE IF EXISTS msgx_flush_probe")
        conn.execute("CREATE TABLE msgx_flush_probe (n int)")
        conn.commit()
        times = []
        for n in range(commits):
            start = time.perf_counter()
            conn.execute("INSERT INTO msgx_flush_probe VALUES (%s)", (n,))
            conn.commit()
            times.append(time.perf_counter() - start)
        conn.execute("DROP TABLE msgx_flush_probe")
        conn.commit()
    return statistics.median(times) * 1000


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flush-ms", type=float, default=4.0,
                        help="how much longer each fsync/fdatasync takes (default 4 ms)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG ...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    if args.flush_ms < 0:
        parser.error("--flush-ms must be 0 or more")
    if shutil.which(os.environ.get("CC", "gcc")) is None:
        parser.error("needs a C compiler (gcc, or CC) to build bench/slow_sync.c")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))    # a terminated run still stops its cluster
    root = private_postgres_root()
    try:
        shim = build_shim(root)
        slow = {"LD_PRELOAD": str(shim), "SLOW_SYNC_US": str(round(args.flush_ms * 1000))}
        cluster = PrivatePostgres(root / "cluster", settings=shared_settings(), server_env=slow)
        cluster.ctl("start")
        try:
            slow_dsn = f"postgresql://postgres@127.0.0.1:{cluster.port}/postgres"
            print(f"slow disk: a commit takes {commit_ms(slow_dsn):.2f} ms on a cluster with a {args.flush_ms:g} ms "
                  f"slower flush (port {cluster.port}), {commit_ms(SHARED_PG):.2f} ms on the shared server",
                  flush=True)
            return subprocess.run(command, env={**os.environ, "MSGX_TEST_PG": slow_dsn}).returncode
        finally:
            cluster.ctl("stop")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
