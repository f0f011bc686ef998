"""A stopped installation asks the AODB nothing (OPS-4, D16, US-08 AC6): after `msgx cutover
stop-writes` every way of registering or sending a request (`msgx request rqfd|rqrd|track`,
`POST /schd/sync`, the request schedules and jobs) is refused naming the stop, and neither
``req_track`` nor COUTMSGS gains a row; once writes reopen (`msgx cutover resume`) the request
registered before the stop is sent, and after a promote the promoted installation sends. On the
real PostgreSQL and MariaDB mailbox (decision M25)."""

from __future__ import annotations

import json

import dagster as dg
from sqlalchemy import text
from starlette.testclient import TestClient

from msgx_dagster.jobs.requests import request_tracking_job, snapshot_request_job
from msgx_dagster.resources import MsgxResource
from msgx_dagster.schedules import schedules_for
from msgx_engine.http.app import create_app
from msgx_engine.http.server import sync_registrar
from tests.cutover_support import ok, refused, run_as, signed  # noqa: F401 - run_as is a fixture

STOPPED = "writes stopped for cut-over at mailbox id"
ONE_ROUND = {"ops": {"request_tracking_op": {"config": {"run_for_s": 0}}}}


def written(app) -> tuple[list[tuple], int]:
    """(req_track rows, COUTMSGS row count): what a refusal must leave as it was."""
    with app.engine.connect() as conn:
        rows = [tuple(r) for r in conn.execute(text("SELECT req_id, rtype, status, seqn FROM req_track ORDER BY 1"))]
    with app.mailbox.engine.connect() as conn:
        return rows, conn.execute(text("SELECT COUNT(*) FROM coutmsgs")).scalar_one()


def stop_writes(cli_run) -> None:
    code, out, err = cli_run("cutover", "stop-writes", "--operator", "ops.wang", "--reason", "go-live")
    assert code == 0, out + err


def test_cli_refuses_every_request_command_while_stopped_and_sends_after_resume(cli_run, app):
    """`msgx request rqfd`, `rqrd` and `track` exit 2 with the stop in their message and write
    nothing; the request registered before the stop goes to COUTMSGS only after `resume`."""
    code, out, err = cli_run("request", "rqfd", "--start", "2026-09-09 00:00", "--end", "2026-09-09 23:59")
    assert code == 0, err
    before_id = json.loads(out)["request_id"]
    stop_writes(cli_run)
    before = written(app)
    assert before[1] == 0
    for argv in (("request", "rqfd", "--start", "2026-09-10 00:00"), ("request", "rqrd", "GLST"),
                 ("request", "track")):
        code, out, err = cli_run(*argv)
        assert code == 2 and err.startswith("msgx request:") and STOPPED in err and "by ops.wang" in err, (argv, err)
        assert written(app) == before, argv

    code, out, err = cli_run("cutover", "resume", "--operator", "ops.wang", "--reason", "called off")
    assert code == 0, out + err
    code, out, err = cli_run("request", "track")
    assert code == 0 and json.loads(out)["sent"] == [before_id], out + err
    assert written(app)[1] == 1


def test_schd_sync_answers_409_writes_stopped_and_registers_nothing(cli_run, app):
    """docs/http-api.md: a valid POST /schd/sync to a stopped installation is 409 `writes_stopped` in
    the error format, naming the stop; nothing is registered."""
    stop_writes(cli_run)
    client = TestClient(create_app(mailbox=app.mailbox, engine=app.engine, schd_sync=sync_registrar(app)))
    resp = client.post("/schd/sync", content=json.dumps({"startDate": "2026-09-09 00:00",
                                                         "endDate": "2026-09-09 23:59"}).encode(),
                       headers={"Content-Type": "application/json"})
    assert resp.status_code == 409, resp.text
    doc = resp.json()
    assert (doc["is_success"], doc["err_code"]) == (False, "writes_stopped") and STOPPED in doc["err_msg"]
    assert written(app) == ([], 0)


def test_request_schedules_skip_and_jobs_write_nothing_while_stopped(cli_run, env, app):
    """The 22:00 day-plan schedule and the tracking schedule skip naming the stop (before it they
    start runs); a tracking run launched anyway sends nothing, the registering job registers nothing."""
    by_name = {s.name: s for s in schedules_for(shadow=False)}
    wanted = ("request_tracking_job_schedule", "snapshot_request_job_schedule")
    with dg.instance_for_test() as instance:
        for name in wanted:
            with dg.build_schedule_context(instance=instance) as ctx:
                assert isinstance(by_name[name](ctx), dg.RunRequest), name
        code, out, err = cli_run("request", "rqrd", "GLST")
        assert code == 0, err
        stop_writes(cli_run)
        before = written(app)
        for name in wanted:
            with dg.build_schedule_context(instance=instance) as ctx:
                tick = by_name[name](ctx)
            assert isinstance(tick, dg.SkipReason) and STOPPED in (tick.skip_message or ""), (name, tick)
    assert request_tracking_job.execute_in_process(run_config=ONE_ROUND, resources={"msgx": MsgxResource()}).success
    registering = snapshot_request_job.execute_in_process(resources={"msgx": MsgxResource()}, raise_on_error=False)
    assert not registering.success
    assert written(app) == before and before[1] == 0


def test_after_promote_the_old_installation_refuses_and_the_promoted_one_sends(settings, pg_dbs, run_as, app):  # noqa: F811
    """The hand-over moves the right to ask the AODB with the right to write: the stopped production
    refuses a day-plan request, the promoted shadow registers it and its tracking round writes the
    one COUTMSGS row."""
    base = {"MSGX_MAILBOX_URL": settings.mailbox_url, "MSGX_HOME": str(settings.home)}
    old, b_url = {**base, "MSGX_DB_URL": settings.db_url}, pg_dbs.fresh()
    ok(run_as({**base, "MSGX_DB_URL": b_url, "MSGX_MODE": "shadow"}, "pump", "--drain"))
    ok(run_as(old, *signed("cutover", "stop-writes")))
    new = {**base, "MSGX_DB_URL": b_url}
    ok(run_as(new, *signed("cutover", "promote", "--from", settings.db_url)))
    window = ("--start", "2026-09-09 00:00", "--end", "2026-09-09 23:59")
    refused(run_as(old, "request", "rqfd", *window), STOPPED)
    req_id = json.loads(ok(run_as(new, "request", "rqfd", *window)))["request_id"]
    assert json.loads(ok(run_as(new, "request", "track")))["sent"] == [req_id]
    assert written(app) == ([], 1)        # nothing registered on the old one; one row in COUTMSGS
