"""Every asset check, next to the assets they describe: backlog age and dead letters on the
message queue, delivery lag on the outbox, drift of the Redis projection, the stand -> airbridge
mapping of the reference data."""

from datetime import UTC, datetime

import dagster as dg

from msgx_dagster.assets.specs import OUTBOX, PROC_STATE, PROJECTION, REFERENCE_DATA
from msgx_dagster.jobs.dispatch import outbox_figures
from msgx_dagster.jobs.projection import NOT_CONFIGURED as PROJECTION_NOT_CONFIGURED
from msgx_dagster.resources import MsgxResource
from msgx_engine.delivery.projection import Projection, connect
from msgx_engine.monitor import Backlog, backlog
from msgx_engine.store.bridges import mapping_status

MAX_HEAD_AGE_S = 600.0
MAX_UNSENT_AGE_S = 120.0


def current_backlog(msgx: MsgxResource) -> Backlog:
    with msgx.open_app() as app:
        return backlog(app.engine, app.mailbox)


@dg.asset_check(asset=PROC_STATE, description="Oldest non-terminal message is younger than the head deadline.")
def backlog_age_check(msgx: MsgxResource) -> dg.AssetCheckResult:
    b = current_backlog(msgx)
    age = (datetime.now(UTC) - b.oldest_open_created_at).total_seconds() if b.oldest_open_created_at else 0.0
    return dg.AssetCheckResult(passed=age < MAX_HEAD_AGE_S,
                               metadata={"oldest_open_age_s": round(age, 1), "open": b.open_messages,
                                         "unregistered": b.unregistered})


@dg.asset_check(asset=PROC_STATE, description="No dead letters waiting for an operator.")
def dead_letters_check(msgx: MsgxResource) -> dg.AssetCheckResult:
    b = current_backlog(msgx)
    return dg.AssetCheckResult(passed=b.dead == 0, severity=dg.AssetCheckSeverity.WARN,
                               metadata={"dead": b.dead})


@dg.asset_check(asset=OUTBOX, description="No dead outbox events; the oldest unsent released event is young.")
def outbox_delivery_check(msgx: MsgxResource) -> dg.AssetCheckResult:
    with msgx.open_app() as app:
        figures = outbox_figures(app.engine)
        kafka_configured = bool(app.settings.kafka_bootstrap)
    ok = figures["dead_events"] == 0 and figures["oldest_unsent_age_s"] < MAX_UNSENT_AGE_S
    return dg.AssetCheckResult(passed=bool(ok), severity=dg.AssetCheckSeverity.WARN,
                               metadata={**figures, "kafka_configured": kafka_configured})


@dg.asset_check(asset=PROJECTION, description="Redis flightInfo equals PostgreSQL's current flights "
                "(count and a sample of differing FLIDs).")
def projection_drift_check(msgx: MsgxResource) -> dg.AssetCheckResult:
    with msgx.open_app() as app:
        if not app.settings.redis_url:
            return dg.AssetCheckResult(passed=True, metadata={"configured": False,
                                                              "note": PROJECTION_NOT_CONFIGURED})
        client = connect(app.settings.redis_url)
        try:
            drift = Projection(client).drift(app.engine)
        finally:
            client.close()
    return dg.AssetCheckResult(passed=drift.total == 0, metadata={"configured": True, **drift.as_metadata()})


@dg.asset_check(asset=REFERENCE_DATA, description="The stand -> airbridge mapping (ABDG) is loaded and no live "
                "flight publishes its stands with ABDG null (US-14 AC3).")
def stand_mapping_check(msgx: MsgxResource) -> dg.AssetCheckResult:
    with msgx.open_app() as app, app.engine.connect() as conn:
        status = mapping_status(conn)
    return dg.AssetCheckResult(passed=status.loaded and status.flights_unknown == 0, metadata=status.as_metadata())


CHECKS = [backlog_age_check, dead_letters_check, outbox_delivery_check, projection_drift_check, stand_mapping_check]
