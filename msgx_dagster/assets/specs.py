"""Asset specs that make the data flow visible as lineage: mailbox -> flight state -> outbox ->
Kafka topics, and the Redis projection. Op jobs log materializations against these keys."""

from __future__ import annotations

import dagster as dg

from msgx_engine.monitor import names
from msgx_engine.monitor.thresholds import HEALTH_INTERVAL

MAILBOX = dg.AssetKey(["aodb", "cminmsgs"])
REQUESTS_OUT = dg.AssetKey(["aodb", "coutmsgs"])
PROC_STATE = dg.AssetKey(["msgx", "proc_state"])
FLIGHT_STATE = dg.AssetKey(["msgx", "flight_state"])
REFERENCE_DATA = dg.AssetKey(["msgx", "reference_data"])
OUTBOX = dg.AssetKey(["msgx", "outbox"])
KAFKA_MSG = dg.AssetKey(["kafka", "msg"])
KAFKA_SCHD = dg.AssetKey(["kafka", "schd"])
PROJECTION = dg.AssetKey(["redis", "flightInfo"])
PARALLEL_RUN = dg.AssetKey(["msgx", "parallel_run"])

ASSET_SPECS: list[dg.AssetSpec] = [
    dg.AssetSpec(MAILBOX, description="The AODB's mailbox (table CMINMSGS in its MySQL database): the "
                 "messages the AODB writes for msgx. Owned by the AODB; msgx reads it and marks each row "
                 "processed.",
                 group_name="aodb", kinds={"mysql"}),
    dg.AssetSpec(REQUESTS_OUT, description="The requests msgx writes for the AODB (table COUTMSGS in the "
                 "mailbox database): day flight plans (RQFD) and reference tables (RQRD).",
                 group_name="aodb", kinds={"mysql"}, deps=[PROC_STATE]),
    dg.AssetSpec(PROC_STATE, description="msgx's record of every mailbox message: whether it was processed, skipped or "
                 "gave up (a dead letter), why, and after how many attempts; plus the processed-marks still "
                 "to write back into the mailbox.", group_name="msgx",
                 kinds={"postgres"}, deps=[MAILBOX]),
    dg.AssetSpec(FLIGHT_STATE, description="The current state of every flight, as msgx holds it in "
                 "PostgreSQL (the truth that Kafka and Redis are fed from), and the record of each daily "
                 "snapshot applied.", group_name="msgx", kinds={"postgres"}, deps=[PROC_STATE]),
    dg.AssetSpec(REFERENCE_DATA, description="The AODB's 23 kinds of reference table (the stand -> airbridge "
                 "mapping among them), as msgx last received them.",
                 group_name="msgx", kinds={"postgres"}, deps=[PROC_STATE]),
    dg.AssetSpec(OUTBOX, description="The outbox: the change and whole-flight events waiting to be "
                 "sent to Kafka, kept until Kafka confirms them.", group_name="msgx", kinds={"postgres"},
                 deps=[FLIGHT_STATE]),
    dg.AssetSpec(KAFKA_MSG, description="Kafka topic msg: one record per flight change, keyed by flight id.",
                 group_name="delivery", kinds={"kafka"}, deps=[OUTBOX]),
    dg.AssetSpec(KAFKA_SCHD, description="Kafka topic schd: the latest whole state of each changed flight, keyed "
                 "by flight id.",
                 group_name="delivery", kinds={"kafka"}, deps=[OUTBOX]),
    dg.AssetSpec(PROJECTION, description="Redis hash flightInfo: every flight's whole state as JSON, keyed by flight "
                 "id, for systems that read the current state.",
                 group_name="delivery", kinds={"redis"}, deps=[FLIGHT_STATE]),
    dg.AssetSpec(PARALLEL_RUN, description="The parallel run before going live: each comparison of this "
                 "installation's flights with the reference, with its unexplained and explained differences, "
                 "the dead-letter backlog and the oldest undelivered event's dwell as plotted metadata "
                 "(compare_job, hourly).", group_name="go_live", deps=[FLIGHT_STATE, OUTBOX]),
]


# --- health -------------------------------------------------------------------------------------
# The health checks live on these assets, which nothing ever materializes. Dagster shows a check's
# result only while that result targets the asset's latest materialization; on an asset that is
# never materialized every result does, so the latest evaluation always shows (never "Not
# evaluated") and no job can turn the lineage green by materializing something. One asset per
# area the operator thinks in, downstream of what it watches.
HEALTH_GROUP = "health"
HEALTH_PROCESSING = dg.AssetKey(["msgx", "health", "processing"])
HEALTH_DELIVERY = dg.AssetKey(["msgx", "health", "delivery"])
HEALTH_REQUESTS = dg.AssetKey(["msgx", "health", "requests"])
HEALTH_REFERENCE_DATA = dg.AssetKey(["msgx", "health", "reference_data"])

# engine check name -> the health asset that carries it; a check not named here lands on processing
CHECK_AREAS: dict[str, dg.AssetKey] = {
    names.BACKLOG_AGE: HEALTH_PROCESSING,
    names.DEAD_LETTERS: HEALTH_PROCESSING,
    names.BACKFILL_LAG: HEALTH_PROCESSING,
    names.UNSUPPORTED_TYPES: HEALTH_PROCESSING,
    names.PIPELINE_LIVENESS: HEALTH_PROCESSING,
    names.DELIVERY_BACKLOG: HEALTH_DELIVERY,
    names.PROJECTION_DRIFT: HEALTH_DELIVERY,
    names.REQUEST_TIMEOUTS: HEALTH_REQUESTS,
    names.STAND_MAPPING: HEALTH_REFERENCE_DATA,
}


def health_asset(check_name: str) -> dg.AssetKey:
    """The health asset an engine check is reported on."""
    return CHECK_AREAS.get(check_name, HEALTH_PROCESSING)


_HEALTH_NOTE = (f" Its checks are evaluated by the health sensor every {HEALTH_INTERVAL.words}; this asset is never "
                "materialized, so the checks always show their latest result.")

HEALTH_SPECS: list[dg.AssetSpec] = [
    dg.AssetSpec(HEALTH_PROCESSING, description="Health of processing: is a pump alive while work waits in "
                 "the mailbox, how old is the queue head, do dead letters or unsupported messages wait, are "
                 "the mailbox's processed-marks written." + _HEALTH_NOTE,
                 group_name=HEALTH_GROUP, deps=[MAILBOX, PROC_STATE]),
    dg.AssetSpec(HEALTH_DELIVERY, description="Health of delivery: are released events reaching Kafka, "
                 "does the Redis projection equal the flight state." + _HEALTH_NOTE,
                 group_name=HEALTH_GROUP, deps=[OUTBOX, KAFKA_MSG, KAFKA_SCHD, PROJECTION]),
    dg.AssetSpec(HEALTH_REQUESTS, description="Health of the requests msgx sends to the AODB: is the "
                 "newest request of each kind answered." + _HEALTH_NOTE,
                 group_name=HEALTH_GROUP, deps=[REQUESTS_OUT]),
    dg.AssetSpec(HEALTH_REFERENCE_DATA, description="Health of the reference data: is the stand -> "
                 "airbridge mapping loaded and known for every live flight's stands." + _HEALTH_NOTE,
                 group_name=HEALTH_GROUP, deps=[REFERENCE_DATA]),
]
