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
]
