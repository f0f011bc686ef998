"""The Dagster code location: assembles asset specs, checks, jobs, schedules, sensors and resources only."""

from __future__ import annotations

import dagster as dg

from msgx_dagster.assets.specs import ASSET_SPECS
from msgx_dagster.checks import CHECKS
from msgx_dagster.jobs.archive import archive_job
from msgx_dagster.jobs.backfill import backfill_job
from msgx_dagster.jobs.dispatch import dispatch_job
from msgx_dagster.jobs.monitor import monitor_job
from msgx_dagster.jobs.projection import projection_rebuild_job
from msgx_dagster.jobs.pump import pump_job
from msgx_dagster.jobs.replay import replay_job
from msgx_dagster.jobs.requests import JOBS as REQUEST_JOBS
from msgx_dagster.resources import resources_for_env
from msgx_dagster.schedules import SCHEDULES
from msgx_dagster.sensors import SENSORS

defs = dg.Definitions(
    assets=ASSET_SPECS,
    asset_checks=CHECKS,
    jobs=[pump_job, backfill_job, dispatch_job, projection_rebuild_job, *REQUEST_JOBS, replay_job,
          archive_job, monitor_job],
    sensors=SENSORS,
    schedules=SCHEDULES,
    resources=resources_for_env(),
)
