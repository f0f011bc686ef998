"""Asset checks: backlog age and dead letters, visible next to the assets they describe."""


from datetime import UTC, datetime

import dagster as dg

from msgx_dagster.assets.specs import PROC_STATE
from msgx_dagster.resources import MsgxResource
from msgx_engine.monitor import Backlog, backlog

MAX_HEAD_AGE_S = 600.0


def current_backlog(msgx: MsgxResource) -> Backlog:
    app = msgx.app()
    try:
        return backlog(app.engine, app.mailbox)
    finally:
        app.dispose()


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


CHECKS = [backlog_age_check, dead_letters_check]
