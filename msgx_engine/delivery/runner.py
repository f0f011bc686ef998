"""Entry points that build a dispatcher from Settings: the CLI (`msgx dispatch`), Dagster jobs and
the pump's optional inline dispatcher thread. Without MSGX_KAFKA_BOOTSTRAP nothing is sent and
the released events stay pending in ``msg_event`` (reported as "not configured")."""

from __future__ import annotations

import logging
import sys
import threading
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace

from sqlalchemy import Engine

from msgx_engine.clock import Clock, DatabaseClock
from msgx_engine.config import Settings
from msgx_engine.db import make_engine
from msgx_engine.delivery.dispatcher import Dispatcher, DispatcherBusy, DispatchOptions, DispatchSummary
from msgx_engine.delivery.producer import KafkaSink
from msgx_engine.store import outbox

log = logging.getLogger(__name__)

# said by `msgx dispatch` and dispatch_job when no Kafka is configured (Redis has its own: projection.py)
KAFKA_NOT_CONFIGURED = "MSGX_KAFKA_BOOTSTRAP is not configured; released events stay pending in the outbox"
SCHEDULED_RUN_S = 55.0   # a dispatch_job run: just under its one-minute schedule


def build_dispatcher(settings: Settings, engine: Engine, *, clock: Clock | None = None,
                     options: DispatchOptions | None = None, delivery_timeout_s: float | None = None,
                     **kw) -> Dispatcher:
    """A dispatcher with the producer Settings ask for (``delivery_timeout_s`` overrides
    MSGX_KAFKA_DELIVERY_TIMEOUT for tests)."""
    if not settings.kafka_bootstrap:
        raise ValueError(KAFKA_NOT_CONFIGURED)
    sink = KafkaSink(settings.kafka_bootstrap,
                     delivery_timeout_s=delivery_timeout_s or settings.kafka_delivery_timeout_s,
                     compression=settings.kafka_compression, max_record_bytes=settings.kafka_max_record_bytes)
    options = replace(options or DispatchOptions(), schd_format=settings.schd_format)
    return Dispatcher(engine, sink, clock or DatabaseClock(engine), topic_msg=settings.topic_msg,
                      topic_schd=settings.topic_schd, options=options, **kw)


def stop_wait_s(settings: Settings) -> float:
    """How long a stopping dispatcher may take: one send's wait for its reports (delivery timeout
    + 5 s in ``KafkaSink``) and the producer's close (5 s), with a margin."""
    return settings.kafka_delivery_timeout_s + 20.0


def unsent(engine: Engine) -> int:
    with engine.connect() as conn:
        return outbox.unsent_count(conn)


def run_dispatch(settings: Settings, drain: bool, *, run_for_s: float = SCHEDULED_RUN_S) -> int:
    """`msgx dispatch [--drain]`: 0 when done (drain: nothing left unsent), 1 when events remain
    undelivered after a drain, 3 when another dispatcher holds the lock."""
    if not settings.kafka_bootstrap:
        print(f"dispatch: {KAFKA_NOT_CONFIGURED}")
        return 0
    settings = settings.resolved()
    engine = make_engine(settings.db_url or "")
    try:
        options = DispatchOptions(run_for_s=0.0 if drain else run_for_s)
        try:
            summary = build_dispatcher(settings, engine, options=options).run()
        except DispatcherBusy as exc:
            print(f"msgx dispatch: {exc}", file=sys.stderr)
            return 3
        left = unsent(engine)
    finally:
        engine.dispose()
    print(f"dispatch finished in {summary.elapsed_s:.2f}s: msg sent {summary.msg_sent}, schd records "
          f"{summary.schd_records} covering {summary.schd_events} events, failed attempts {summary.failed}, "
          f"dead {summary.dead}, unsent left {left}")
    return 1 if drain and left else 0


class BackgroundDispatcher:
    """A dispatcher thread beside a long-lived pump, for sub-second delivery between scheduled
    dispatch runs. While another dispatcher holds the lock it retries every ``retry_s``; stop()
    ends it at the next poll. The pump calls ``wake()`` when it commits released events, which
    ends the dispatcher's pause at once: delivery follows the commit, not the next poll."""

    def __init__(self, settings: Settings, engine: Engine, *, clock: Clock | None = None,
                 options: DispatchOptions | None = None, retry_s: float = 5.0) -> None:
        self.settings = settings
        self.engine = engine
        self.clock = clock
        self.options = replace(options or DispatchOptions(), run_for_s=float("inf"), listen=False)
        self.retry_s = retry_s
        self.summary = DispatchSummary()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="msgx-dispatcher", daemon=True)

    def __enter__(self) -> BackgroundDispatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop at the next poll. The wait outlasts one send (delivery timeout + 5 s, plus the
        close), so a send in flight ends with its marks instead of dying with the process and
        being resent."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s if timeout_s is not None else stop_wait_s(self.settings))

    def wake(self) -> None:
        """Events were released: look for them now rather than after the poll."""
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.summary = build_dispatcher(self.settings, self.engine, clock=self.clock, options=self.options,
                                                should_stop=self._stop.is_set, wake=self._wake).run()
            except DispatcherBusy:
                pass
            except Exception:  # noqa: BLE001 - keep the pump alive; the scheduled job is the backstop
                log.exception("inline dispatcher failed; retrying in %.0fs", self.retry_s)
            self._stop.wait(self.retry_s)


def inline_dispatcher(settings: Settings, engine: Engine, *,
                      enabled: bool = True) -> AbstractContextManager[BackgroundDispatcher | None]:
    """The pump's optional inline dispatcher: a BackgroundDispatcher when enabled and Kafka is configured."""
    if not enabled or not settings.kafka_bootstrap:
        return nullcontext()
    return BackgroundDispatcher(settings, engine)
