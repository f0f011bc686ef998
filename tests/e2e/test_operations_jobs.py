"""The operations jobs run the way operators run them: ``dagster job execute -m
msgx_dagster.definitions -j <job> -c <run config>`` in a subprocess (DESIGN §4, US-10, US-11)."""

from __future__ import annotations

import pytest

from msgx_engine.store import audit
from tests.builders import gtdt
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
