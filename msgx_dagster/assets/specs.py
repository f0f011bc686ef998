"""Asset specs that make the data flow visible as lineage: mailbox -> flight state -> outbox ->
Kafka topics, and the Redis projection. Op jobs log materializations against these keys."""

from __future__ import annotations

import dagster as dg

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
    dg.AssetSpec(MAILBOX, description="Shared MySQL mailbox CMINMSGS written by the AODB (external).",
                 group_name="aodb", kinds={"mysql"}),
    dg.AssetSpec(REQUESTS_OUT, description="COUTMSGS: requests msgx sends to the AODB (RQFD/RQRD).",
                 group_name="aodb", kinds={"mysql"}, deps=[PROC_STATE]),
    dg.AssetSpec(PROC_STATE, description="Per-message processing record (status, reason, attempts) and "
                 "the backfill todo that marks CMINMSGS_DATE_PROCESSED.", group_name="msgx",
                 kinds={"postgres"}, deps=[MAILBOX]),
    dg.AssetSpec(FLIGHT_STATE, description="Authoritative current flight state: flight_schd + 9 detail "
                 "tables, snapshot ledgers.", group_name="msgx", kinds={"postgres"}, deps=[PROC_STATE]),
    dg.AssetSpec(REFERENCE_DATA, description="Reference data (ref_master) from the AODB's 23 types.",
                 group_name="msgx", kinds={"postgres"}, deps=[PROC_STATE]),
    dg.AssetSpec(OUTBOX, description="msg_event outbox: change and whole-state events, released in "
                 "transaction 2.", group_name="msgx", kinds={"postgres"}, deps=[FLIGHT_STATE]),
    dg.AssetSpec(KAFKA_MSG, description="Kafka topic msg: one record per change, key FLID.",
                 group_name="delivery", kinds={"kafka"}, deps=[OUTBOX]),
    dg.AssetSpec(KAFKA_SCHD, description="Kafka topic schd: latest whole state per FLID per flush.",
                 group_name="delivery", kinds={"kafka"}, deps=[OUTBOX]),
    dg.AssetSpec(PROJECTION, description="Redis hash flightInfo: whole-state JSON per FLID.",
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
    "backlog_age": HEALTH_PROCESSING,
    "dead_letters": HEALTH_PROCESSING,
    "backfill_lag": HEALTH_PROCESSING,
    "unsupported_types": HEALTH_PROCESSING,
    "pipeline_liveness": HEALTH_PROCESSING,
    "delivery_backlog": HEALTH_DELIVERY,
    "projection_drift": HEALTH_DELIVERY,
    "request_timeouts": HEALTH_REQUESTS,
    "stand_mapping": HEALTH_REFERENCE_DATA,
}


def health_asset(check_name: str) -> dg.AssetKey:
    """The health asset an engine check is reported on."""
    return CHECK_AREAS.get(check_name, HEALTH_PROCESSING)


_HEALTH_NOTE = (" Its checks are evaluated by the health sensor every 30 s; this asset is never "
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
