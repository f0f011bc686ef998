"""Request tracking under Dagster (US-08 AC2/AC3, D16, C-24; DESIGN §5): the jobs and schedules
are in the code location, a tracking run sends what is registered with one COUTMSGS asset event,
the daily jobs register tomorrow's RQFD and the 23 RQRDs, and the run loop polls each second."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from msgx_dagster.assets.specs import REQUESTS_OUT
from msgx_dagster.jobs.requests import reference_refresh_job, request_tracking_job, snapshot_request_job
from msgx_dagster.resources import MsgxResource
from msgx_engine.requests.tracker import RequestTracker, track_for
from msgx_engine.sis.requests import RQRD_TYPES
from msgx_engine.sis.times import local

ONE_ROUND = {"ops": {"request_tracking_op": {"config": {"run_for_s": 0}}}}


def requests(app) -> list[tuple]:
    with app.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text("SELECT rtype, styp, fday, status FROM req_track ORDER BY req_id"))]




def test_tracking_run_sends_registered_requests_with_one_asset_event(env, app):
    """US-08 AC2: a run sends REGISTERED requests (RQFD and one RQRD: C-24 one in flight per type)
    and logs one COUTMSGS materialization for the round, not one per request."""
    tracker = RequestTracker(app.engine, app.mailbox, app.clock)
    tracker.register_rqfd(datetime(2026, 9, 9), None)
    tracker.register_rqrd("GLST")
    result = request_tracking_job.execute_in_process(run_config=ONE_ROUND, resources={"msgx": MsgxResource()})
    assert result.success
    assert [r[3] for r in requests(app)] == ["SENT", "SENT"]
    mats = [m for m in result.asset_materializations_for_node("request_tracking_op") if m.asset_key == REQUESTS_OUT]
    assert len(mats) == 1 and mats[0].metadata["requests_sent"].value == 2
    again = request_tracking_job.execute_in_process(run_config=ONE_ROUND, resources={"msgx": MsgxResource()})
    assert again.success and again.asset_materializations_for_node("request_tracking_op") == []


def test_daily_jobs_register_tomorrow_and_every_reference_type(env, app):
    """US-08 AC1: the snapshot job registers an RQFD for tomorrow's operating day (local date of the
    database clock); the refresh job one RQRD per reference type; nothing is sent by them."""
    before = local(datetime.now(UTC)).date()
    assert snapshot_request_job.execute_in_process(resources={"msgx": MsgxResource()}).success
    after = local(datetime.now(UTC)).date()
    ((rtype, styp, fday, status),) = requests(app)
    assert (rtype, styp, status) == ("RQFD", "NONE", "REGISTERED")
    assert fday in {before + timedelta(days=1), after + timedelta(days=1)}
    assert reference_refresh_job.execute_in_process(resources={"msgx": MsgxResource()}).success
    rqrd = [r for r in requests(app) if r[0] == "RQRD"]
    assert sorted(r[1] for r in rqrd) == sorted(RQRD_TYPES) and {r[3] for r in rqrd} == {"REGISTERED"}
    with app.mailbox.engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM coutmsgs")).scalar_one() == 0


def test_track_for_polls_each_second_until_the_run_ends(app, clock):
    """D16/US-08 AC3 in a scheduled run: rounds one poll apart for run_for_s, so a request registered
    mid-run leaves at the next round and a timeout is seen at the next round after its deadline
    (fake time: no sleeping)."""
    tracker = RequestTracker(app.engine, app.mailbox, app.clock)
    now = [0.0]
    rounds: list[tuple] = []
    registered: dict[str, int] = {}

    def sleep(seconds: float) -> None:
        now[0] += seconds
        clock.advance(seconds)
        if now[0] == 2.0:
            registered["rqrd"] = tracker.register_rqrd("GLST").req_id

    total = track_for(tracker, run_for_s=40, poll_s=1.0, sleep=sleep, monotonic=lambda: now[0],
                      on_round=lambda s: rounds.append((now[0], s.sent, s.timed_out)))
    req = registered["rqrd"]
    assert rounds == [(2.0, [req], []), (32.0, [], [req])]
    assert total.sent == [req] and total.timed_out == [req]
    assert now[0] == 40.0
