"""``msgx cutover stop-writes``: the active installation gives up the right to process and mark the
mailbox at a recorded watermark (OPS-4, PRE-1).

1. Refused at once (nothing written) on a shadow, or where writes are stopped already.
2. A pump of this installation that is running is stopped through the record itself: the row says
   "stopped" first, the pump sees it within a second and exits, and every pump started afterwards
   (the Dagster sensor relaunches it) refuses before it takes the mailbox lock. The command then
   holds the pump's lock, so nothing of this installation processes while it works.
3. It takes the mailbox lock: held by anybody else, a second installation holds the right, and the
   command is refused (the record is put back as it was).
4. It drains: every mailbox mark still owed is written, every released event delivered to Kafka.
5. The watermark is the highest id finished (``rules.finished_high_water``); it is refused when a
   message changed flights without finishing, when finished rows lie above an open one, or when a
   mark or an event is still owed (the hand-over is complete only when every finished row is marked,
   or the other side would process it again). Dead events (and the events of their flights held
   behind them) are shown and refused too, unless ``--accept-dead N`` names their number: after the
   hand-over nobody publishes them (the new installation takes them for published, this one
   publishes nothing while stopped), so losing them is the operator's decision, not a side effect.
6. The record says stopped at the watermark, with the audit row, in one transaction; the locks go.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Engine

from msgx_engine.app import App
from msgx_engine.cutover import rules
from msgx_engine.cutover.common import Refused, Report, mailbox_lock, refuse_if, wait_for_lock
from msgx_engine.delivery.dispatcher import DispatcherBusy, DispatchOptions
from msgx_engine.delivery.runner import build_dispatcher
from msgx_engine.pipeline.backfill import Backfill
from msgx_engine.store import audit, cutover_state, locks
from msgx_engine.store.cutover_state import CutoverState
from msgx_engine.store.session_lock import SessionLock

log = logging.getLogger(__name__)

HOLDER = "msgx cutover stop-writes"


@dataclass(frozen=True)
class Stopped:
    watermark: int
    marked: int
    delivered: int
    audit_id: int


def drain_outbox(app: App, wait_s: float) -> int:
    """Deliver every released event to Kafka now; returns the records sent. A dispatcher already
    running (the dispatch schedule's) is waited for, at most ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            summary = build_dispatcher(app.settings, app.engine, options=DispatchOptions(run_for_s=0.0)).run()
            return summary.msg_sent + summary.schd_records
        except DispatcherBusy as exc:
            if time.monotonic() >= deadline:
                raise Refused(f"another dispatcher of this installation keeps running ({exc}): stop it (the "
                              "dispatch schedule, `msgx dispatch`) and run stop-writes again") from exc
            time.sleep(1.0)


def stop_writes(app: App, *, operator: str, reason: str, deliver: Callable[[], int] | None = None,
                wait_s: float = 120.0, accept_dead: int | None = None, report: Report | None = None) -> Stopped:
    """The procedure in the module doc. ``deliver`` drains this installation's outbox to Kafka and
    returns how many records it sent (default ``drain_outbox``). ``accept_dead``: the number of dead
    events (with those held behind them) the operator accepts are never published (step 5)."""
    report = report if report is not None else Report()
    deliver = deliver or (lambda: drain_outbox(app, wait_s))
    engine = app.engine
    with engine.connect() as conn:
        previous = cutover_state.read(conn)
    refuse_if(rules.stop_refusal(shadow_mode=app.settings.shadow, state=previous))
    report.say("this installation is production and holds the right to process the mailbox")
    pump = _stop_the_pump(engine, previous, wait_s, report)
    try:
        try:
            mailbox = mailbox_lock(app.mailbox.url)
        except Refused:
            _put_back(engine, previous)
            raise
        try:
            report.say("the mailbox lock is free: no other installation processes the mailbox")
            return _drain_and_stop(app, pump, previous, operator=operator, reason=reason, deliver=deliver,
                                   accept_dead=accept_dead, report=report)
        finally:
            mailbox.dispose()
    finally:
        pump.release()


def _stop_the_pump(engine: Engine, previous: CutoverState | None, wait_s: float, report: Report) -> SessionLock:
    """This installation's pump lock: at once when no pump runs; else after the record told the
    running pump to stop (put back, and refused, when it does not stop within ``wait_s``)."""
    held = wait_for_lock(engine, locks.PUMP, HOLDER, 0)
    if held is not None:
        report.say("no pump of this installation is running")
        return held
    with engine.begin() as conn:
        cutover_state.write(conn, cutover_state.stopping(previous))
    report.say("a pump of this installation is running: told it to stop")
    held = wait_for_lock(engine, locks.PUMP, HOLDER, wait_s)
    if held is None:
        _put_back(engine, previous)
        raise Refused(f"the running pump of this installation did not stop within {wait_s:.0f}s: stop it (and the "
                      "Dagster sensor that starts it) and run stop-writes again")
    report.say("the pump stopped")
    return held


def _put_back(engine: Engine, previous: CutoverState | None) -> None:
    with engine.begin() as conn:
        cutover_state.restore(conn, previous)


def _drain_and_stop(app: App, pump: SessionLock, previous: CutoverState | None, *, operator: str, reason: str,
                    deliver: Callable[[], int], accept_dead: int | None, report: Report) -> Stopped:
    assert pump.conn is not None
    conn = pump.conn
    try:
        marked = Backfill(app.mailbox, app.clock).drain(conn, max_seconds=60.0).marked
        delivered = deliver() if app.settings.kafka_bootstrap else 0
        pos = cutover_state.position(conn)
        watermark = rules.finished_high_water(pos.lowest_open, pos.accounted_for)
        events = cutover_state.undelivered(conn, watermark)
        dead = cutover_state.dead_examples(conn, watermark) if events.dead else []
        problems = rules.stop_problems(
            watermark=watermark, applied_open=pos.applied_open,
            finished_above=cutover_state.finished_above(conn, watermark),
            pending_marks=cutover_state.pending_marks(conn, watermark), waiting_events=events.waiting,
            kafka=bool(app.settings.kafka_bootstrap), dead_events=events.dead, held_events=events.held,
            accepted_dead=accept_dead)
        conn.commit()
    except BaseException:
        conn.rollback()
        _put_back(app.engine, previous)
        raise
    if events.lost:
        report.say(f"ATTENTION: {events.lost} event(s) will never be published: {events.dead} dead, e.g. "
                   f"{'; '.join(dead)}, and {events.held} held behind them (see `msgx outbox`)")
    if problems:
        _put_back(app.engine, previous)
        raise Refused("writes not stopped: " + "; ".join(problems))
    report.say(f"drained: {marked} mailbox mark(s) written, {delivered} record(s) delivered to Kafka; nothing is "
               f"owed up to mailbox id {watermark}" + (f" ({events.lost} undeliverable event(s) accepted as never "
                                                       "published)" if events.lost else ""))
    with conn.begin():
        locks.lock_writer_row(conn)
        audit_id = audit.record(conn, operator, "cutover_stop_writes", reason,
                                {"watermark": watermark, "accept_dead": accept_dead},
                                {"marked": marked, "delivered": delivered, "dead_events": events.dead,
                                 "held_behind_dead": events.held})
        role = previous.role if previous is not None else cutover_state.PRODUCTION
        cutover_state.write(conn, CutoverState(role, cutover_state.STOPPED, watermark,
                                               previous.took_over_at if previous else None, audit_id))
    report.audit_id = audit_id
    report.say(f"writes stopped at mailbox id {watermark}: this installation's pumps refuse to run until a promote "
               "of another installation is rolled back to this one")
    log.warning("cutover stop-writes (audit %s): writes stopped at mailbox id %s", audit_id, watermark)
    return Stopped(watermark, marked, delivered, audit_id)
