"""The Dagster code location: assembles resources, jobs, sensors, schedules and asset specs only."""

from __future__ import annotations

import dagster as dg

from msgx_dagster.assets.specs import ASSET_SPECS
from msgx_dagster.checks import CHECKS
from msgx_dagster.jobs.backfill import backfill_job, backfill_schedule
from msgx_dagster.jobs.dispatch import dispatch_job, dispatch_schedule, outbox_delivery_check
from msgx_dagster.jobs.projection import projection_drift_check, projection_rebuild_job
from msgx_dagster.jobs.pump import pump_job
from msgx_dagster.jobs.requests import JOBS as REQUEST_JOBS
from msgx_dagster.jobs.requests import SCHEDULES as REQUEST_SCHEDULES
from msgx_dagster.resources import resources_for_env
from msgx_dagster.sensors.inbox import inbox_sensor

defs = dg.Definitions(
    assets=ASSET_SPECS,
    asset_checks=[*CHECKS, outbox_delivery_check, projection_drift_check],
    jobs=[pump_job, backfill_job, dispatch_job, projection_rebuild_job, *REQUEST_JOBS],
    sensors=[inbox_sensor],
    schedules=[backfill_schedule, dispatch_schedule, *REQUEST_SCHEDULES],
    resources=resources_for_env(),
)
