"""compare_job and its schedule: one comparison of the parallel run in process, against a second
msgx PostgreSQL database, recorded as the ``parallel_run`` asset's numeric metadata (what Dagster
plots) and in msgx's own database, where ``msgx compare --summary`` reads it (OPS-4)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import MappingProxyType

import dagster as dg
import pytest

from msgx_dagster.assets.specs import PARALLEL_RUN
from msgx_dagster.jobs.compare import compare_job
from msgx_dagster.resources import MsgxResource
from msgx_dagster.schedules import NO_REFERENCE, compare_schedule
from msgx_engine.compare.run import live_since
from msgx_engine.db import make_engine
from msgx_engine.state.model import FlightState
from msgx_engine.store import parallel_run
from msgx_engine.store.flights import FlightRepository
from tests.pipeline_support import drain_now, proc


def persist(url: str, flights: dict[str, str]) -> None:
    """Flights of the live days, FLID -> FLNO."""
    fday = live_since()
    states = [FlightState(flid=flid, fields=MappingProxyType({"FLNO": flno}), fday=fday, state_version=1)
              for flid, flno in flights.items()]
    engine = make_engine(url)
    with engine.begin() as conn:
        FlightRepository(conn).persist_next_states(states)
    engine.dispose()


def recorded(url: str) -> list[parallel_run.RecordedRun]:
    engine = make_engine(url)
    with engine.connect() as conn:
        runs = parallel_run.runs_since(conn, datetime(2000, 1, 1, tzinfo=UTC))
    engine.dispose()
    return runs


@pytest.fixture
def env(settings, monkeypatch):
    for key in ("MSGX_KAFKA_BOOTSTRAP", "MSGX_REDIS_URL", "MSGX_COMPARE_AGAINST", "MSGX_COMPARE_KNOWN",
                "MSGX_COMPARE_KEY", "MSGX_MODE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MSGX_DB_URL", settings.db_url)
    monkeypatch.setenv("MSGX_MAILBOX_URL", settings.mailbox_url)
    return monkeypatch


def test_compare_job_records_the_figures_as_plotted_metadata_and_in_the_database(env, settings, app, pg_dbs,
                                                                                 tmp_path, cli_run):
    """OPS-4: a comparison with one unexplained difference, one explained by the known-differences
    file and one dead letter waiting: the run succeeds (differences are what it records), the
    parallel_run materialization carries each figure as a number, and the same figures are in msgx's
    database: the summary over the last day then fails on them."""
    reference = pg_dbs.fresh()
    persist(settings.db_url, {"F1": "CA1", "F2": "CA2", "F3": "CA3"})
    persist(reference, {"F1": "CA1", "F2": "XX2", "F4": "CA4"})
    dead = app.mailbox.put("<MSG><META>")
    drain_now(app)
    assert proc(app, dead).status == "DEAD"
    known = tmp_path / "known.yml"
    known.write_text('rules:\n  - field: "*"\n    when: {flids: ["F4"]}\n    reason: planted\n', encoding="utf-8")
    env.setenv("MSGX_COMPARE_AGAINST", reference)
    env.setenv("MSGX_COMPARE_KNOWN", str(known))

    with dg.DagsterInstance.ephemeral() as instance:
        result = compare_job.execute_in_process(resources={"msgx": MsgxResource()}, instance=instance)
        assert result.success
        [mat] = result.asset_materializations_for_node("compare_op")
        assert mat.asset_key == PARALLEL_RUN
        meta = {k: v.value for k, v in mat.metadata.items()}
        assert {k: meta[k] for k in ("unexplained_differences", "explained_differences", "missing_here",
                                     "missing_there", "fields_differing", "flights_compared", "dlq_backlog")} == {
            "unexplained_differences": 2, "explained_differences": 1, "missing_here": 0, "missing_there": 1,
            "fields_differing": 1, "flights_compared": 4, "dlq_backlog": 1}
        assert isinstance(mat.metadata["oldest_event_dwell_s"], dg.FloatMetadataValue)
        assert meta["verdict"] == "fail" and "# Flight state comparison" in meta["report"]
        assert instance.get_latest_materialization_event(PARALLEL_RUN) is not None

    [run] = recorded(settings.db_url)
    assert run.figures["unexplained"] == 2 and run.figures["dlq_backlog"] == 1 and run.figures["code"] == 1
    assert run.selection["known"] == str(known)
    code, out, _ = cli_run("compare", "--summary", "--since", "1d", "--json")
    doc = json.loads(out)
    assert code == 1 and doc["basis"]["comparisons"] == 1
    assert doc["figures"]["unexplained_max"] == 2 and doc["figures"]["dlq_backlog_max"] == 1


def test_an_unreadable_reference_fails_the_run_and_is_recorded(env, settings):
    """A reference that cannot be read: the run fails naming why (red in the UI), and the record keeps
    it as a comparison that proves nothing."""
    env.setenv("MSGX_COMPARE_AGAINST", settings.db_url.rsplit("/", 1)[0] + "/msgx_no_such_reference")
    result = compare_job.execute_in_process(resources={"msgx": MsgxResource()}, raise_on_error=False)
    assert not result.success
    [run] = recorded(settings.db_url)
    assert run.figures["code"] == 2 and "reference unreadable" in run.figures["error"]
    assert "msgx_no_such_reference" in run.selection["against"]


def test_the_schedule_skips_with_the_reason_while_no_reference_is_set(env):
    """An installation that is not in a parallel run: every hourly tick is skipped, saying why, not
    failed; with a reference set the tick starts a run."""
    with dg.instance_for_test() as instance, dg.build_schedule_context(instance=instance) as context:
        skipped = compare_schedule(context)
        assert isinstance(skipped, dg.SkipReason) and skipped.skip_message == NO_REFERENCE
        env.setenv("MSGX_COMPARE_AGAINST", "postgresql+psycopg://ref/prod")
        assert isinstance(compare_schedule(context), dg.RunRequest)
    assert compare_schedule.cron_schedule == "0 * * * *"
