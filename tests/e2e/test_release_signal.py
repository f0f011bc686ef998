"""P19 (latency): a dispatcher in a process of its own (``msgx dispatch``, a scheduled
``dispatch_job``) is woken by the pump's announcement of each release (PostgreSQL NOTIFY/LISTEN)
instead of waiting out its poll, as the inline dispatcher is woken in process (US-07 AC1: the
record follows the commit). Both sides are best effort: no failure of theirs reaches the pump or
the dispatcher, whose poll finds the events as before. Real PostgreSQL, MariaDB and tansu."""

from __future__ import annotations

import threading
import time

from sqlalchemy import create_engine, select

from msgx_engine.delivery.dispatcher import DispatchOptions
from msgx_engine.delivery.runner import BackgroundDispatcher, build_dispatcher
from msgx_engine.pipeline.pump import PumpOptions
from msgx_engine.store.release_signal import ReleaseListener, ReleaseNotifier
from msgx_engine.store.tables import msg_event
from tests.builders import gtdt

POLL_S = 120.0     # the dispatcher's pause: only a wake-up can end it within the test's waits


def _sent(app) -> list[bool]:
    with app.engine.connect() as conn:
        return [r.sent_at is not None for r in conn.execute(select(msg_event.c.sent_at)
                                                            .where(msg_event.c.topic == "msg"))]


def _wait(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_p19_a_dispatcher_process_sends_as_soon_as_the_pump_releases(kapp, clock):
    """The dispatcher has done its first round (nothing due) and pauses for POLL_S; a pump run
    that announces its releases (``msgx pump``'s wiring) makes it send the message's `msg` record
    well inside that pause."""
    stop = threading.Event()
    rounds = threading.Event()
    dispatcher = build_dispatcher(kapp.settings, kapp.engine, clock=clock, should_stop=stop.is_set,
                                  on_heartbeat=lambda _summary: rounds.set(),
                                  options=DispatchOptions(run_for_s=600.0, poll_s=POLL_S, heartbeat_s=0.0))
    thread = threading.Thread(target=dispatcher.run)
    thread.start()
    try:
        _wait(rounds.is_set, 30, "the dispatcher never finished its first round")
        kapp.mailbox.put(gtdt("W1", (1, "A1")))
        with ReleaseNotifier(kapp.engine) as announce:
            summary = kapp.pump(PumpOptions(exit_when_waiting=True, idle_poll_s=0.01), on_release=announce).run()
        assert summary.processed.get("SUCCEEDED") == 1
        _wait(lambda: _sent(kapp) == [True], 30, "the released event waited for the poll: no wake-up")
    finally:
        stop.set()
        dispatcher.wake.set()
        thread.join(30)
    assert not thread.is_alive()


def test_p19_inline_dispatcher_is_woken_in_process_and_does_not_listen(settings):
    """The pump's inline dispatcher needs no LISTEN session: the pump calls its ``wake``."""
    assert BackgroundDispatcher(settings, None).options.listen is False  # type: ignore[arg-type]
    assert DispatchOptions().listen is True


def test_p19_no_database_neither_side_fails(settings):
    """A notifier or listener whose database cannot be reached logs and goes on: the pump's
    commit and the dispatcher's loop never see the error (the poll still finds the events)."""
    url = settings.db_url.rsplit("/", 1)[0] + "/msgx_no_such_database"
    engine = create_engine(url, connect_args={"connect_timeout": 5})
    try:
        announce = ReleaseNotifier(engine)
        announce()
        announce()
        announce.close()
        wake = threading.Event()
        with ReleaseListener(engine, wake, retry_s=0.05) as listener:
            _wait(lambda: listener._thread.is_alive(), 5, "the listener thread never started")
            assert not listener.listening.is_set()
        assert not listener._thread.is_alive() and not wake.is_set()
    finally:
        engine.dispose()


def test_p19_listener_sets_wake_for_each_announcement(app):
    """Announced on one session, heard on another: ``wake`` is set."""
    wake = threading.Event()
    with ReleaseListener(app.engine, wake) as listener:
        _wait(listener.listening.is_set, 10, "LISTEN never held")
        with ReleaseNotifier(app.engine) as announce:
            announce()
        _wait(wake.is_set, 10, "the announcement was not heard")
        wake.clear()
        with ReleaseNotifier(app.engine) as announce:
            announce()
        _wait(wake.is_set, 10, "the second announcement was not heard")


def test_p19_a_pump_announces_only_where_a_dispatcher_can_run(app, kapp):
    """Without Kafka no dispatcher runs, so the pump sends no NOTIFY per commit; with it, it does."""
    with app.release_notifier() as none:
        assert none is None
    with kapp.release_notifier() as announce:
        assert isinstance(announce, ReleaseNotifier)
