"""Every asset check, next to the assets they describe. The seven health checks are the engine's
(``msgx_engine.monitor.checks``): clicking one here evaluates it now without alerting; the
scheduled ``monitor_job`` evaluates all of them every minute, alerts on state changes and reports
its results on these same checks. The stand -> airbridge mapping check is Dagster's alone."""

import dagster as dg

from msgx_dagster.assets.specs import REFERENCE_DATA
from msgx_dagster.jobs.monitor import CHECK_ASSETS, check_result, dagster_check_name
from msgx_dagster.resources import MsgxResource
from msgx_engine.store.bridges import mapping_status


def engine_check(name: str) -> dg.AssetChecksDefinition:
    asset, description = CHECK_ASSETS[name]

    @dg.asset_check(asset=asset, name=dagster_check_name(name), description=description)
    def _check(msgx: MsgxResource) -> dg.AssetCheckResult:
        with msgx.open_app() as app:
            return check_result(app.check(name))

    return _check


backlog_age_check = engine_check("backlog_age")
dead_letters_check = engine_check("dead_letters")
delivery_backlog_check = engine_check("delivery_backlog")
backfill_lag_check = engine_check("backfill_lag")
projection_drift_check = engine_check("projection_drift")
unsupported_types_check = engine_check("unsupported_types")
request_timeouts_check = engine_check("request_timeouts")


@dg.asset_check(asset=REFERENCE_DATA, description="The stand -> airbridge mapping (ABDG) is loaded and no live "
                "flight publishes its stands with ABDG null (US-14 AC3).")
def stand_mapping_check(msgx: MsgxResource) -> dg.AssetCheckResult:
    with msgx.open_app() as app, app.engine.connect() as conn:
        status = mapping_status(conn)
    return dg.AssetCheckResult(passed=status.loaded and status.flights_unknown == 0, metadata=status.as_metadata())


CHECKS = [backlog_age_check, dead_letters_check, delivery_backlog_check, backfill_lag_check, projection_drift_check,
          unsupported_types_check, request_timeouts_check, stand_mapping_check]
