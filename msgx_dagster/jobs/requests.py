"""Request tracking under Dagster (US-08, D16, request lifecycle, C-24); the schedules are in ``schedules.py``.

- ``request_tracking_job``: tracking rounds one second apart (send REGISTERED requests to COUTMSGS,
  time out overdue SENT ones) for the run's ``run_for_s``; the minute schedule starts runs of just
  under ten minutes and skips while one is active (P18, looping runs). ``singleton:
  requests`` keeps runs apart; the tracker's own advisory lock keeps it apart from a manual
  ``msgx request track`` too. One COUTMSGS asset event per round that sent something. The run
  leaves a heartbeat (``HEARTBEAT``, every ten seconds between rounds): a run whose worker died
  with its code server is told from a live one by it, and its schedule fails it and starts the
  next (``orphans``).
- ``snapshot_request_job``: daily, registers an RQFD for tomorrow's whole operating day (the
  AODB's SCHD RESP then replaces that day, US-06).
- ``reference_refresh_job``: daily, registers an RQRD for each of the 23 reference types; its
  schedule starts STOPPED until the reference line is in production (turn it on in the UI).
"""

import math
from collections.abc import Callable
from datetime import datetime, timedelta
from time import monotonic

import dagster as dg

from msgx_dagster.assets.specs import REQUESTS_OUT
from msgx_dagster.jobs.common import materialize, singleton, stops_when_terminated
from msgx_dagster.orphans import Pulse
from msgx_dagster.resources import MsgxResource
from msgx_engine.requests.tracker import Registered, RequestTracker, TrackSummary, track_for
from msgx_engine.sis.requests import RQRD_TYPES
from msgx_engine.sis.times import local
from msgx_engine.store.cutover_state import RequestsStopped

HEARTBEAT = "request_tracking"     # the heartbeat component of the request-tracking runs


class RequestTrackingConfig(dg.Config):
    run_for_s: float = 55.0   # a run launched by hand; the schedule's runs loop for LOOPING_RUN_S (P18); 0 = one round
    poll_s: float = 1.0


@dg.op(description="Send registered AODB requests to COUTMSGS and time out unanswered ones, a round a second "
                   "for the run's run_for_s.")
def request_tracking_op(context: dg.OpExecutionContext, config: RequestTrackingConfig, msgx: MsgxResource) -> None:
    with stops_when_terminated(context) as terminated, msgx.open_app() as app:
        tracker = RequestTracker(app.engine, app.mailbox, app.clock)
        pulse = Pulse(app.engine, HEARTBEAT)
        pulse()

        def report(summary: TrackSummary) -> None:
            if summary.sent or summary.recovered:
                materialize(context, REQUESTS_OUT, {"requests_sent": len(summary.sent),
                                                    "requests_recovered": len(summary.recovered)})
            if summary.timed_out:
                context.log.warning(f"request(s) timed out without an answer: {summary.timed_out}")

        def pause(seconds: float) -> None:
            pulse()
            terminated.wait(seconds)

        # a terminated run ends its rounds at once: the pause is cut short, and the clock reads
        # past any deadline, so the loop stops after one last (quick) round
        try:
            total = track_for(tracker, config.run_for_s, config.poll_s, on_round=report, sleep=pause,
                              monotonic=lambda: math.inf if terminated.is_set() else monotonic())
        except RequestsStopped as exc:     # stop-writes ran meanwhile: the run ends, its schedule skips from now
            context.log.warning(f"request tracking stops: {exc}")
            return
        context.log.info(f"request tracking finished: {total.as_json()}")


@dg.job(tags=singleton("requests"), executor_def=dg.in_process_executor,
        description="Sends the registered requests to the AODB (day plans, reference tables, through "
                    "COUTMSGS) and marks those it leaves unanswered too long as timed out.")
def request_tracking_job() -> None:
    request_tracking_op()


def registering_job(name: str, description: str,
                    register: Callable[[RequestTracker, datetime], list[Registered]]) -> dg.JobDefinition:
    """A job whose one op registers requests (never sends them: request_tracking_job does)."""

    @dg.op(name=f"{name}_op", description=description)
    def register_op(context: dg.OpExecutionContext, msgx: MsgxResource) -> None:
        with msgx.open_app() as app:
            done = register(RequestTracker(app.engine, app.mailbox, app.clock), app.clock.now())
        context.log.info(f"registered {len(done)} request(s): {[r.as_json() for r in done]}")

    @dg.job(name=name, tags=singleton("requests-register"), executor_def=dg.in_process_executor,
            description=f"{description} request_tracking_job sends it.")
    def registering() -> None:
        register_op()

    return registering


def rqfd_for_tomorrow(tracker: RequestTracker, now: datetime) -> list[Registered]:
    """Tomorrow's whole operating day, local time (the SCHD RESP then replaces that day, US-06),
    once per day: a second run for the same day (the 22:00 tick again after the daemon host's
    clock was stepped back across it) registers nothing (T12, day plan once a day)."""
    registered = tracker.register_day_plan(local(now).date() + timedelta(days=1))
    return [registered] if registered is not None else []


def rqrd_for_every_type(tracker: RequestTracker, now: datetime) -> list[Registered]:
    return [tracker.register_rqrd(rtype) for rtype in RQRD_TYPES]


snapshot_request_job = registering_job("snapshot_request_job", "Register tomorrow's day-plan request (RQFD).",
                                       rqfd_for_tomorrow)
reference_refresh_job = registering_job("reference_refresh_job",
                                        "Register a reference-data request (RQRD) per type.", rqrd_for_every_type)

JOBS = [request_tracking_job, snapshot_request_job, reference_refresh_job]
