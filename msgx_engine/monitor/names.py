"""The health checks' names, spelled once.

Every reader keys on these: the checks themselves (``checks.CHECKS``), ``msgx status`` (first
command, runbook section), the Dagster asset checks (descriptions, health assets), the health
sensor, ``/metrics`` (``msgx_check_failing{check=…}``) and the stored alert state. The Prometheus
rules and the runbook spell them as text; a unit test holds every name they spell to this list.

Plain strings rather than an Enum: a name is written to PostgreSQL, to Prometheus labels and to
JSON as it is, with no adapter deciding between an enum's name and its value.
"""

from __future__ import annotations

from typing import Final

BACKLOG_AGE: Final = "backlog_age"
DEAD_LETTERS: Final = "dead_letters"
DELIVERY_BACKLOG: Final = "delivery_backlog"
BACKFILL_LAG: Final = "backfill_lag"
PROJECTION_DRIFT: Final = "projection_drift"
UNSUPPORTED_TYPES: Final = "unsupported_types"
REQUEST_TIMEOUTS: Final = "request_timeouts"
PIPELINE_LIVENESS: Final = "pipeline_liveness"
STAND_MAPPING: Final = "stand_mapping"

# every check, in the order they are evaluated and shown
CHECK_NAMES: Final[tuple[str, ...]] = (
    BACKLOG_AGE, DEAD_LETTERS, DELIVERY_BACKLOG, BACKFILL_LAG, PROJECTION_DRIFT, UNSUPPORTED_TYPES,
    REQUEST_TIMEOUTS, PIPELINE_LIVENESS, STAND_MAPPING)
