"""The Dagster code location: assembles asset specs, checks, jobs, schedules, sensors and resources only.

Loading refuses a configuration msgx would refuse (``code_location_settings``): no URLs without
MSGX_EMBEDDED, an unknown MSGX_MODE, a shadow instance on the production topic names. The mode
picks the schedules (shadow: the request schedules are off, D29, shadow mode)."""

from __future__ import annotations

import dagster as dg

from msgx_dagster.assets.specs import ASSET_SPECS, HEALTH_SPECS
from msgx_dagster.checks import CHECKS
from msgx_dagster.jobs.archive import archive_job
from msgx_dagster.jobs.backfill import backfill_job
from msgx_dagster.jobs.compare import compare_job
from msgx_dagster.jobs.dispatch import dispatch_job
from msgx_dagster.jobs.monitor import monitor_job
from msgx_dagster.jobs.operator import JOBS as OPERATOR_JOBS
from msgx_dagster.jobs.projection import projection_rebuild_job
from msgx_dagster.jobs.pump import pump_job
from msgx_dagster.jobs.replay import replay_job
from msgx_dagster.jobs.requests import JOBS as REQUEST_JOBS
from msgx_dagster.resources import code_location_settings, resources_for_env
from msgx_dagster.schedules import schedules_for
from msgx_dagster.sensors import SENSORS


def build_defs(*, shadow: bool) -> dg.Definitions:
    return dg.Definitions(
        assets=[*ASSET_SPECS, *HEALTH_SPECS],
        asset_checks=CHECKS,
        jobs=[pump_job, backfill_job, dispatch_job, projection_rebuild_job, *REQUEST_JOBS, replay_job,
              archive_job, monitor_job, *OPERATOR_JOBS, compare_job],
        sensors=SENSORS,
        schedules=schedules_for(shadow=shadow),
        resources=resources_for_env(),
    )


defs = build_defs(shadow=code_location_settings().shadow)
