"""Released events announced across processes: PostgreSQL ``NOTIFY`` from the pump, ``LISTEN`` in
a dispatcher process (decision P19, release NOTIFY).

Under Dagster the long-lived pump run wakes its inline dispatcher in process the moment a commit
releases events (P15, pump latency under dagster dev). A dispatcher in another process (``msgx dispatch`` beside
``msgx pump``, or a scheduled ``dispatch_job`` beside a pump drain run) had only its 0.1 s poll, so a record
waited half a poll on average. Now the pump announces each release on ``CHANNEL`` and such a
dispatcher listens: its pause ends at once, as the inline one's does.

Both sides are best effort and change nothing that is stored: a lost notification only means the
dispatcher finds the events at its next poll, which stays as it was.
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from msgx_engine.redact import safe_text

log = logging.getLogger(__name__)

CHANNEL = "msgx_released"
_NOTIFY_SQL = f"NOTIFY {CHANNEL}"
_LISTEN_SQL = f"LISTEN {CHANNEL}"


def _session(engine: Engine) -> Connection:
    """A session of ``engine``'s own, in autocommit: a NOTIFY is sent at once, a LISTEN holds."""
    return engine.connect().execution_options(isolation_level="AUTOCOMMIT")


class ReleaseNotifier:
    """The pump's ``on_release`` when no dispatcher runs in its process: one NOTIFY after each commit
    that released events, on a session kept for it (a round trip, no transaction). A failure is
    logged and the session dropped; the next release opens a new one."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._conn: Connection | None = None

    def __call__(self) -> None:
        try:
            if self._conn is None:
                self._conn = _session(self.engine)
            self._conn.exec_driver_sql(_NOTIFY_SQL)
        except SQLAlchemyError as exc:
            log.info("released events not announced (%s); a dispatcher finds them at its next poll",
                     safe_text(exc))
            self.close()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except SQLAlchemyError:
                pass

    def __enter__(self) -> ReleaseNotifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ReleaseListener:
    """Sets ``wake`` at every announced release, from a thread that LISTENs on a session of its own
    until stopped. A lost session is logged and opened again after ``retry_s``; the session is
    closed, never handed back to the pool still listening."""

    def __init__(self, engine: Engine, wake: threading.Event, *, retry_s: float = 5.0, wait_s: float = 0.25) -> None:
        self.engine = engine
        self.wake = wake
        self.retry_s = retry_s
        self.wait_s = wait_s                  # how often the thread looks at its stop flag
        self.listening = threading.Event()    # set while LISTEN holds (tests wait for it)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="msgx-release-listener", daemon=True)

    def __enter__(self) -> ReleaseListener:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(self.wait_s * 4)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._listen()
            except Exception as exc:  # noqa: BLE001 - never takes the dispatcher down; its poll goes on
                self.listening.clear()
                log.warning("not listening for released events (%s); retrying in %.0f s",
                            safe_text(exc), self.retry_s)
                self._stop.wait(self.retry_s)

    def _listen(self) -> None:
        conn = _session(self.engine)
        try:
            conn.exec_driver_sql(_LISTEN_SQL)
            raw = conn.connection.driver_connection
            self.listening.set()
            while not self._stop.is_set():
                for _ in raw.notifies(timeout=self.wait_s):    # type: ignore[union-attr]
                    self.wake.set()
        finally:
            self.listening.clear()
            conn.invalidate()      # a listening session never goes back to the pool
            conn.close()
