"""The demo's Dagster instance: ``$MSGX_HOME/dagster/dagster.yaml``, written by ``msgx demo``.

Run, event-log and schedule storage live in the ``dagster`` database of the embedded PostgreSQL
(dagster-postgres), so a run's history outlives the processes that made it: ``DAGSTER_HOME=
$MSGX_HOME/dagster dagster run list`` shows the headless demo's run, and the UI shows it when
``msgx demo`` starts later. Runs go through the QueuedRunCoordinator with one run at a time per
``singleton`` tag value, the same limits as ``deploy/dagster.yaml`` (production).

Writing a YAML file needs no Dagster import: the engine stays free of Dagster.
"""

from __future__ import annotations

from pathlib import Path

# dagster-postgres needs psycopg2 (its dependency): its event log sends `NOTIFY run_events, <param>`,
# which psycopg 3's server-side parameters refuse. msgx's own engines use psycopg 3.
STORAGE_DRIVER = "postgresql+psycopg2"

# One run at a time per `singleton` tag value (pump_job has singleton=pump, dispatch_job
# singleton=dispatch, ...), each run tagged with who launched it, launched in four threads, at most
# 20 in progress: the same block as deploy/dagster.yaml; a test keeps them equal. (A module path in
# YAML: no Dagster import here.)
RUN_LIMITS = """\
run_coordinator:
  module: msgx_dagster.run_coordinator
  class: AttributingRunCoordinator
  config:
    user_header: X-Forwarded-User
    dequeue_use_threads: true
    dequeue_num_workers: 4
concurrency:
  runs:
    max_concurrent_runs: 20
    tag_concurrency_limits:
      - key: singleton
        value:
          applyLimitPerUniqueValue: true
        limit: 1
"""

# The daemon evaluates sensors in threads, so the health sensor never delays inbox_sensor: the same
# block as deploy/dagster.yaml.
SENSOR_THREADS = """\
sensors:
  use_threads: true
  num_workers: 4
"""

# The webserver's first-visit "Join the Dagster community" dialog covers the UI of a fresh demo
# (it shows on localhost until dismissed; `nux` is the instance setting that turns it off).
NO_WELCOME_DIALOG = "nux:\n  enabled: false\n"


def instance_yaml(storage_url: str) -> str:
    """The instance config for a PostgreSQL at ``storage_url`` (a SQLAlchemy URL)."""
    return ("# Written by `msgx demo`; rewritten on every start (the embedded server's socket may move).\n"
            "storage:\n  postgres:\n"
            f'    postgres_url: "{storage_url}"\n'
            + RUN_LIMITS + SENSOR_THREADS +
            "telemetry:\n  enabled: false\n" + NO_WELCOME_DIALOG)


def write_instance(dagster_home: Path, storage_url: str) -> Path:
    dagster_home.mkdir(parents=True, exist_ok=True)
    path = dagster_home / "dagster.yaml"
    path.write_text(instance_yaml(storage_url), "utf-8")
    return path
