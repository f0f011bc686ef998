"""The operations jobs run the way operators run them: ``dagster job execute -m
msgx_dagster.definitions -j <job> -c <run config>`` in a subprocess (DESIGN §4, US-10, US-11)."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from msgx_engine.store import audit
from tests.builders import envelope, gtdt
from tests.dagster_support import job_runner, op_config
from tests.fault_support import fault_fixture, until_dead  # noqa: F401  (the `fault` fixture)
from tests.pipeline_support import drain_now, gates, proc


@pytest.fixture
def job(env_for, tmp_path):
    """Run one job in a subprocess against this test's databases; returns (exit status, output)."""
    runner = job_runner(env_for, tmp_path)

    def run(name: str, run_config: dict | None = None, **env: str) -> tuple[int, str]:
        done = runner(name, run_config, **env)
        return done.returncode, done.stdout + done.stderr

    return run


def _replay(**config: object) -> dict:
    return op_config("replay_op", **config)


def test_replay_job_previews_then_applies_with_audit(app, clock, fault, job):
    """US-10 AC1/AC5: replay_job's typed run config is the Launchpad's replay form: a preview run
    changes nothing and reports per message; an apply run without operator fails; with operator
    and reason it re-queues, audited; a refused apply is a failed run."""
    fault()
    m = app.mailbox.put(gtdt("JR1", (1, "A1")))
    until_dead(app, clock, m)
    fault.fix()

    code, out = job("replay_job", _replay(ids=[m]))
    assert code == 0, out[-3000:]
    assert proc(app, m).status == "DEAD" and "verdict: replayable" in out

    code, out = job("replay_job", _replay(ids=[m], mode="apply"))
    assert code != 0 and "operator and reason" in out and proc(app, m).status == "DEAD"

    code, out = job("replay_job", _replay(ids=[m], mode="apply", operator="ops-desk", reason="disk replaced"))
    assert code == 0, out[-3000:]
    assert proc(app, m).status == "PENDING"
    drain_now(app)
    assert proc(app, m).status == "SUCCEEDED" and gates(app, "JR1") == [(1, "A1")]

    code, out = job("replay_job", _replay(ids=[m], mode="apply", operator="ops-desk", reason="again"))
    assert code != 0 and "replay refused" in out
    with app.engine.connect() as conn:
        entries = audit.entries(conn, action="replay")
    assert [(e.operator, e.outcome["requeued"]) for e in entries] == [("ops-desk", 0), ("ops-desk", 1)]


def test_archive_job_moves_finished_messages_with_counts(app, job):
    """US-11: archive_job runs the same code as `msgx archive`; the retention comes from the run
    config (or MSGX_ARCHIVE_AFTER), the counts are run metadata; a dry run moves nothing."""
    ids = [app.mailbox.put(envelope("LDM", "NONE", "<LDM/>\n")) for _ in range(3)]
    drain_now(app)
    code, out = job("archive_job", op_config("archive_op", older_than="0s", dry_run=True))
    assert code == 0, out[-3000:]
    with app.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM proc_state_archive")).scalar_one() == 0
    code, out = job("archive_job", op_config("archive_op", older_than="0s", batch=2))
    assert code == 0, out[-3000:]
    assert "proc_state" in out and "archived or removed" in out
    with app.engine.connect() as conn:
        assert sorted(r[0] for r in conn.execute(text("SELECT msg_id FROM proc_state_archive"))) == ids
        assert conn.execute(text("SELECT count(*) FROM proc_state")).scalar_one() == 0
        [entry] = audit.entries(conn, action="archive")
    assert entry.operator.startswith("archive_job:") and entry.outcome["proc_state"] == 3
    code, out = job("archive_job", op_config("archive_op", older_than="2w"))
    assert code != 0 and "not a duration" in out
