"""acknowledge_job and outbox_revive_job: the Launchpad's forms for what waits for an operator
(OPS-2, US-10). They run in process against the test's databases and call the same engine
functions as ``msgx acknowledge`` and ``msgx outbox --apply``; a refused request is a failed run."""

from __future__ import annotations

from sqlalchemy import select

from msgx_dagster.jobs.operator import acknowledge_job, outbox_revive_job
from msgx_dagster.resources import MsgxResource
from msgx_engine.store import audit
from msgx_engine.store.tables import msg_event
from tests.builders import gtdt
from tests.dagster_support import op_config
from tests.pipeline_support import drain_now, proc
from tests.refused_events import kill_events_for_real


def execute(job, config: dict):
    return job.execute_in_process(run_config=config, resources={"msgx": MsgxResource()}, raise_on_error=False)


def entries(app, action: str):
    with app.engine.connect() as conn:
        return audit.entries(conn, action=action)


def test_acknowledge_job_closes_a_dead_letter_and_fails_when_refused(env, app):
    """OPS-2: the run acknowledges a DEAD(malformed) message with operator and reason (audited, an
    observation of proc_state with the audit id); without operator it fails; acknowledging it again
    is refused: a failed run, nothing changed."""
    m = app.mailbox.put("<MSG><META>")
    drain_now(app)
    assert proc(app, m).status == "DEAD"

    bare = execute(acknowledge_job, op_config("acknowledge_op", ids=[m]))
    assert not bare.success and proc(app, m).acknowledged_at is None

    done = execute(acknowledge_job, op_config("acknowledge_op", ids=[m], operator="ops-desk", reason="junk"))
    assert done.success
    assert proc(app, m).acknowledged_by == "ops-desk"
    [entry] = entries(app, "acknowledge")
    observed = [e.event_specific_data.asset_observation for e in done.all_events
                if e.event_type_value == "ASSET_OBSERVATION"]
    assert [o.metadata["audit_id"].value for o in observed] == [entry.audit_id]

    again = execute(acknowledge_job, op_config("acknowledge_op", ids=[m], operator="ops-desk", reason="twice"))
    assert not again.success
    failure = next(e for e in again.all_events if e.event_type_value == "STEP_FAILURE")
    assert "already acknowledged" in str(failure.event_specific_data.error)
    assert [e.outcome["acknowledged"] for e in entries(app, "acknowledge")] == [0, 1]


def test_outbox_revive_job_revives_dead_events(env, app, clock, kafka_bootstrap):
    """OPS-2, US-07 AC1: events dead-lettered by the dispatcher's own failure path (a topic the
    broker refuses, one attempt) are revived by the run (all_dead), audited; a second run finds none and
    fails; a run without a choice of events fails."""
    app.mailbox.put(gtdt("OJ1", (1, "A1")))
    drain_now(app)
    kill_events_for_real(app.engine, clock, kafka_bootstrap)
    with app.engine.connect() as conn:
        rows = conn.execute(select(msg_event.c.event_id, msg_event.c.dead_at)).fetchall()
    assert len(rows) == 2 and all(r.dead_at is not None for r in rows)

    unchosen = execute(outbox_revive_job, op_config("outbox_revive_op", operator="ops", reason="x"))
    assert not unchosen.success

    done = execute(outbox_revive_job, op_config("outbox_revive_op", all_dead=True, operator="ops",
                                                reason="broker back"))
    assert done.success
    with app.engine.connect() as conn:
        rows = conn.execute(select(msg_event.c.dead_at, msg_event.c.send_attempts)).fetchall()
    assert all(r.dead_at is None and r.send_attempts == 0 for r in rows)
    again = execute(outbox_revive_job, op_config("outbox_revive_op", all_dead=True, operator="ops", reason="again"))
    assert not again.success
    assert [e.outcome["revived"] for e in entries(app, "outbox_revive")] == [0, 2]
