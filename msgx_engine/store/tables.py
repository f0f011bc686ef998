"""SQLAlchemy Core tables of msgx's own PostgreSQL (DESIGN §4).

The migrations create exactly these tables; tests compare the migrated schema with this module,
so the two cannot drift apart silently.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Date,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    func,
    literal,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.sql.elements import ColumnElement

from msgx_engine.handlers.seasons import SEASON_FLIGHT_SCALARS, SEASON_ROUTE_PARTS
from msgx_engine.sis.fields import COLLECTIONS, flight_columns
from msgx_engine.store.status import OPEN, Status, TodoStatus, sql_in

metadata = MetaData()


def _ts(name: str, **kw) -> Column:
    return Column(name, DateTime(timezone=True), **kw)


flight_schd = Table(
    "flight_schd",
    metadata,
    Column("flid", Text, primary_key=True),
    Column("fday", Date, nullable=True),
    Column("state_version", BigInteger, nullable=False, server_default=text("0")),
    Column("last_message_id", BigInteger),
    Column("deleted", Boolean, nullable=False, server_default=text("false")),
    _ts("deleted_at"),
    _ts("created_at", nullable=False, server_default=func.now()),
    _ts("updated_at", nullable=False, server_default=func.now()),
    *[Column(c, Text) for c in flight_columns()],
    Column("stand_bridges", Text),   # derived airbridges per stand, JSON (state.bridges, D27, stand to airbridge; 0007)
    Column("field_msg", JSONB),      # key -> mailbox id that last wrote it (state.stamps, F6, last writer wins; 0012)
)


# Code-share children are found by MAID (FDEL cascade, INV-21/22); most flights have none.
Index("flight_schd_maid_idx", flight_schd.c.maid, postgresql_where=text("maid IS NOT NULL"))
# The live flights storing no airbridges (no stand yet, or ABDG never loaded): the health figure
# counts those naming a stand without reading the whole table (store.bridges.mapping_status; 0017).
Index("flight_schd_bridges_unknown_idx", flight_schd.c.flid,
      postgresql_where=text("stand_bridges IS NULL AND NOT deleted"))


def _detail_table(table_name: str) -> Table:
    specs = [c for c in COLLECTIONS if c.table == table_name]
    columns: list[str] = []
    for spec in specs:
        for col in spec.columns:
            if col not in columns:
                columns.append(col)
    routed = any(s.route_kind for s in specs)
    key = ("flid", "route_kind", "ordinal") if routed else ("flid", "ordinal")
    return Table(
        table_name,
        metadata,
        Column("flid", Text, nullable=False),
        *([Column("route_kind", Text, nullable=False)] if routed else []),
        Column("ordinal", Integer, nullable=False),
        Column("source_seq", Text),
        Column("record_version", BigInteger, nullable=False),
        _ts("created_at", nullable=False, server_default=func.now()),
        *[Column(c, Text) for c in columns],
        PrimaryKeyConstraint(*key, name=f"{table_name}_pkey"),
    )


detail_tables: dict[str, Table] = {
    name: _detail_table(name) for name in dict.fromkeys(c.table for c in COLLECTIONS)
}

schd_gen = Table(
    "schd_gen",
    metadata,
    Column("fday", Date, primary_key=True),
    Column("version", BigInteger, nullable=False),
    Column("last_message_id", BigInteger),
    _ts("updated_at", nullable=False, server_default=func.now()),
)

schd_gen_flid = Table(
    "schd_gen_flid",
    metadata,
    Column("fday", Date, nullable=False),
    Column("flid", Text, nullable=False),
    PrimaryKeyConstraint("fday", "flid", name="schd_gen_flid_pkey"),
)

pipeline_lock = Table(
    "pipeline_lock",
    metadata,
    Column("name", Text, primary_key=True),
    Column("holder", Text),
    _ts("updated_at", nullable=False, server_default=func.now()),
)

proc_state = Table(
    "proc_state",
    metadata,
    Column("msg_id", BigInteger, primary_key=True, autoincrement=False),
    Column("status", Text, nullable=False),
    Column("reason", Text),
    Column("error_class", Text),
    Column("error_detail", Text),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    _ts("next_attempt_at"),
    _ts("created_at", nullable=False, server_default=func.now()),
    _ts("applied_at"),
    _ts("terminal_at"),
    _ts("updated_at", nullable=False, server_default=func.now()),
    Column("identity_key", Text),              # readable identity, for display; bindings: msg_identity
    Column("payload_hash", Text),
    Column("dup_of", BigInteger),
    Column("msg_type", Text),
    Column("msg_styp", Text),
    Column("late_arrival", Boolean, nullable=False, server_default=text("false")),
    _ts("requeued_at"),        # an operator's replay (0006): the retry deadline counts from here
    _ts("acknowledged_at"),    # an operator closed this dead letter without a replay (0014)
    Column("acknowledged_by", Text),
    _ts("arrived_at"),         # a row registered after the fact: when it arrived where it was first (0021, L16,
                               # verdicts from the mailbox)
)
Index("proc_state_open_idx", proc_state.c.msg_id, postgresql_where=text(f"status IN {sql_in(OPEN)}"))
# what waits for an operator (0014): unacknowledged DEAD and SKIPPED(unsupported) messages
ATTENTION_WHERE = ("acknowledged_at IS NULL AND (status = 'DEAD' "
                   "OR (status = 'SKIPPED' AND reason = 'unsupported'))")
Index("proc_state_attention_idx", proc_state.c.msg_id, postgresql_where=text(ATTENTION_WHERE))

proc_state_hst = Table(
    "proc_state_hst",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("msg_id", BigInteger, nullable=False),
    Column("status", Text, nullable=False),
    Column("reason", Text),
    Column("error_class", Text),
    Column("error_detail", Text),
    Column("attempt", Integer),
    _ts("at", nullable=False, server_default=func.now()),
)
Index("proc_state_hst_msg_idx", proc_state_hst.c.msg_id)

# Identity bindings within the window (D26, identity window, store/identity.py): one row per identity, keyed by the
# SHA-256 of its text so the key is always 64 characters.
msg_identity = Table(
    "msg_identity",
    metadata,
    Column("identity_hash", Text, primary_key=True),
    Column("identity", Text, nullable=False),
    Column("msg_id", BigInteger, nullable=False),
    Column("payload_hash", Text),
    _ts("registered_at", nullable=False),
    _ts("bound_at", nullable=False),
)
Index("msg_identity_registered_idx", msg_identity.c.registered_at)

msg_event = Table(
    "msg_event",
    metadata,
    Column("event_id", BigInteger, primary_key=True, autoincrement=True),
    Column("msg_id", BigInteger, nullable=False),
    Column("flid", Text, nullable=False),
    Column("topic", Text, nullable=False),          # 'msg' | 'schd' (logical topic)
    Column("kind", Text, nullable=False),           # 'change' | 'state' | 'tombstone'
    Column("state_version", BigInteger, nullable=False),
    Column("payload", Text, nullable=False),
    _ts("created_at", nullable=False, server_default=func.now()),
    _ts("released_at"),
    _ts("sent_at"),
    Column("send_attempts", Integer, nullable=False, server_default=text("0")),
    _ts("next_send_at"),
    Column("send_error", Text),
    _ts("dead_at"),
)
Index("msg_event_msg_idx", msg_event.c.msg_id)
Index("msg_event_unsent_idx", msg_event.c.topic, msg_event.c.event_id,
      postgresql_where=text("sent_at IS NULL AND dead_at IS NULL"))

backfill_todo = Table(
    "backfill_todo",
    metadata,
    Column("msg_id", BigInteger, primary_key=True, autoincrement=False),
    Column("status", Text, nullable=False, server_default=text(f"'{TodoStatus.PENDING}'")),  # TodoStatus
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    _ts("next_attempt_at"),
    Column("last_error", Text),
    _ts("created_at", nullable=False, server_default=func.now()),
    _ts("done_at"),
)
Index("backfill_todo_pending_idx", backfill_todo.c.msg_id,
      postgresql_where=text(f"status = '{TodoStatus.PENDING}'"))


def inline_in(column: Column, values: Iterable[str]) -> ColumnElement[bool]:
    """``column IN (values)`` with the values written into the statement's text, not bound.

    PostgreSQL uses a partial index only when the statement's WHERE implies the index's predicate
    at planning time. psycopg prepares a statement once it has run five times on a connection, and
    from then on PostgreSQL may plan it once for all parameter values (a generic plan): with the
    statuses bound, that plan cannot prove the predicate, and a read meant for the few open rows
    walks the primary key over every finished one instead (the queue's low-water read took 220 ms
    at the end of a 300,000-message backlog, every late scan). Written into the text, every plan
    of the statement can use the index. The values are fixed words of this code, never input."""
    return column.in_([literal(str(v), literal_execute=True) for v in values])


# The rows the partial indexes proc_state_open_idx and backfill_todo_pending_idx hold, as query
# conditions every plan can match to the index (``inline_in``).
IS_OPEN = inline_in(proc_state.c.status, OPEN)
IS_PENDING_TODO = inline_in(backfill_todo.c.status, (TodoStatus.PENDING,))
# ... and the two halves of proc_state_attention_idx (ATTENTION_WHERE)
IS_WAITING_DEAD = (inline_in(proc_state.c.status, (Status.DEAD,)), proc_state.c.acknowledged_at.is_(None))
IS_WAITING_UNSUPPORTED = (inline_in(proc_state.c.status, (Status.SKIPPED,)),
                          inline_in(proc_state.c.reason, ("unsupported",)), proc_state.c.acknowledged_at.is_(None))

intake_state = Table(
    "intake_state",
    metadata,
    Column("name", Text, primary_key=True),
    Column("low_water", BigInteger, nullable=False, server_default=text("0")),
    Column("high_water", BigInteger),         # largest mailbox id accounted for (NULL: not adopted yet)
    _ts("last_full_scan_at"),
    _ts("updated_at", nullable=False, server_default=func.now()),
)

intake_gap = Table(
    "intake_gap",
    metadata,
    Column("msg_id", BigInteger, primary_key=True, autoincrement=False),
    _ts("first_seen_at", nullable=False, server_default=func.now()),
    _ts("passed_at"),
    _ts("arrived_at"),
)

req_track = Table(
    "req_track",
    metadata,
    Column("req_id", BigInteger, primary_key=True, autoincrement=True),
    Column("rtype", Text, nullable=False),      # RQFD | RQRD
    Column("styp", Text, nullable=False),       # NONE | requested reference type
    Column("fday", Date),
    Column("start_text", Text),
    Column("end_text", Text),
    Column("status", Text, nullable=False),     # REGISTERED|SENT|DONE|TIMEOUT|FAILED|EXPIRED
    Column("coutmsgs_id", BigInteger),
    Column("answer_msg_id", BigInteger),
    Column("detail", Text),
    _ts("created_at", nullable=False, server_default=func.now()),
    _ts("sent_at"),
    _ts("done_at"),
    Column("seqn", Text),                       # META SEQN, recorded before the COUTMSGS insert (0005)
    Column("adopted", Boolean, nullable=False, server_default=text("false")),   # sent by another installation (0021)
)
Index("req_track_adopted_idx", req_track.c.coutmsgs_id, unique=True, postgresql_where=req_track.c.adopted)

ref_master = Table(
    "ref_master",
    metadata,
    Column("rtype", Text, nullable=False),
    Column("rkey", Text, nullable=False),
    Column("fields", Text, nullable=False),
    Column("source", Text),
    Column("batch_id", BigInteger),
    _ts("refreshed_at", nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("rtype", "rkey", name="ref_master_pkey"),
)

# Reference categories a full package (DNLD/RESP) has replaced, and when (0007). The airbridge
# mapping is known only once ABDG is here (US-14 AC3).
ref_load = Table(
    "ref_load",
    metadata,
    Column("rtype", Text, primary_key=True),
    Column("msg_id", BigInteger),
    _ts("loaded_at", nullable=False, server_default=func.now()),
)

# --- snapshot runs and seasonal schedules (migration 0002) --------------------------------------
schd_gen_run = Table(
    # One row per accepted SCHD snapshot: what it did, including the flights it left to a later
    # day (D3, a flight's day). The run's metadata lives here so operators can query it; proc_state only has status.
    "schd_gen_run",
    metadata,
    Column("msg_id", BigInteger, primary_key=True, autoincrement=False),
    Column("fday", Date, nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("styp", Text, nullable=False),
    Column("flights", Integer, nullable=False),
    Column("written", Integer, nullable=False),
    Column("deleted", Integer, nullable=False),
    Column("kept_later", Integer, nullable=False),
    Column("kept_later_flids", Text),              # JSON array, NULL when none
    Column("req_id", BigInteger),
    _ts("created_at", nullable=False, server_default=func.now()),
    Column("report", Text),                        # the reconciliation, JSON (0010)
)

_SEASON_KEY = ("snam", "sdat", "edat")   # raw SIS strings (D19, SIS time strings): SDAT/EDAT are DDMONYY

season_sched = Table(
    "season_sched",
    metadata,
    Column("snam", Text, nullable=False),
    Column("sdat", Text, nullable=False),
    Column("edat", Text, nullable=False),
    Column("apcd", Text),
    Column("recs", Integer, nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("last_message_id", BigInteger, nullable=False),
    _ts("updated_at", nullable=False, server_default=func.now()),
    PrimaryKeyConstraint(*_SEASON_KEY, name="season_sched_pkey"),
)

season_flight = Table(
    "season_flight",
    metadata,
    Column("snam", Text, nullable=False),
    Column("sdat", Text, nullable=False),
    Column("edat", Text, nullable=False),
    Column("ordinal", Integer, nullable=False),
    *[Column(c.lower(), Text) for c in SEASON_FLIGHT_SCALARS],
    PrimaryKeyConstraint(*_SEASON_KEY, "ordinal", name="season_flight_pkey"),
)

season_route_point = Table(
    "season_route_point",
    metadata,
    Column("snam", Text, nullable=False),
    Column("sdat", Text, nullable=False),
    Column("edat", Text, nullable=False),
    Column("flight_ordinal", Integer, nullable=False),
    Column("route_kind", Text, nullable=False),     # ROUT | ERUT
    Column("ordinal", Integer, nullable=False),
    Column("source_seq", Text),
    *[Column(c.lower(), Text) for c in SEASON_ROUTE_PARTS],
    PrimaryKeyConstraint(*_SEASON_KEY, "flight_ordinal", "route_kind", "ordinal",
                         name="season_route_point_pkey"),
)

# --- the operator audit trail (migration 0006; owner: store/audit.py) ------------------------------
operator_audit = Table(
    # One row per operator request (replay, skip, recover, archive, ...), committed with its effect.
    "operator_audit",
    metadata,
    Column("audit_id", BigInteger, primary_key=True, autoincrement=True),
    _ts("at", nullable=False, server_default=func.now()),
    Column("operator", Text, nullable=False),
    Column("action", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("selection", Text),      # JSON of the selection / arguments
    Column("outcome", Text),        # JSON summary (counts, refusals)
)

operator_audit_item = Table(
    "operator_audit_item",
    metadata,
    Column("audit_id", BigInteger, nullable=False),
    Column("msg_id", BigInteger, nullable=False),
    Column("before_status", Text),
    Column("after_status", Text),
    Column("result", Text),         # e.g. 'requeued' | 'refused: malformed' | 'skipped'
    PrimaryKeyConstraint("audit_id", "msg_id", name="operator_audit_item_pkey"),
)
Index("operator_audit_item_msg_idx", operator_audit_item.c.msg_id)


# --- the archive (migration 0008; owner: store/archive.py) -----------------------------------------
def _archive_copy(source: Table, name: str, *extra: Column) -> Table:
    """An archive table with ``source``'s columns (same names, types, nullability; no defaults or
    unique constraints: archiving copies values) plus ``extra``."""
    columns = [Column(c.name, c.type, primary_key=c.primary_key, nullable=c.nullable, autoincrement=False)
               for c in source.columns]
    return Table(name, metadata, *columns, *extra)


proc_state_archive = _archive_copy(
    proc_state, "proc_state_archive",
    Column("mark_status", Text),            # the backfill todo's outcome: DONE | ALREADY | FAILED
    _ts("marked_at"),
    _ts("archived_at", nullable=False, server_default=func.now()))
proc_state_hst_archive = _archive_copy(proc_state_hst, "proc_state_hst_archive")
Index("proc_state_hst_archive_msg_idx", proc_state_hst_archive.c.msg_id)
msg_event_archive = _archive_copy(msg_event, "msg_event_archive")
Index("msg_event_archive_msg_idx", msg_event_archive.c.msg_id)
Index("msg_event_archive_flid_idx", msg_event_archive.c.flid, msg_event_archive.c.msg_id)


# --- monitoring (migration 0013; owner: store/monitoring.py) ---------------------------------------
alert_state = Table(
    # One row per health check: its last evaluation and whether its state change was announced, so a
    # change ok -> failing -> ok is detected across runs and alerted once (OPS-2).
    "alert_state",
    metadata,
    Column("check_name", Text, primary_key=True),
    Column("failing", Boolean, nullable=False),
    _ts("since", nullable=False),               # when it entered its current state
    _ts("evaluated_at", nullable=False),
    Column("summary", Text),
    Column("value", Float),                     # the check's headline figure (age s, count, drift)
    Column("notified_failing", Boolean),        # the state last announced (NULL: none announced yet)
    _ts("notified_at"),
    Column("notify_error", Text),               # why the last announcement failed (it is retried)
    Column("notified_value", Float),            # the figure the last failing alert was sent for (0014)
    Column("notified_detail", Text),            # ... and the ids it named, so a rise re-alerts naming new ones
)

heartbeat = Table(
    # Liveness of the long-lived workers (the pump): the last time each reported from its loop.
    "heartbeat",
    metadata,
    Column("component", Text, primary_key=True),
    Column("pid", Integer),
    Column("host", Text),
    _ts("started_at"),
    _ts("beat_at", nullable=False),
)


kafka_status = Table(
    # The dispatcher's last send error and the broker it tried (migration 0020; owner:
    # store/kafka_status.py), so `msgx outbox`, the checks and the alerts of every process show it.
    "kafka_status",
    metadata,
    Column("name", Text, primary_key=True),
    Column("broker", Text, nullable=False),
    Column("last_error", Text),
    _ts("error_at"),
    _ts("delivered_at"),                        # the first delivery after that error (NULL: none yet)
)


# --- durable metric totals (migration 0014; owner: store/metric_totals.py) -------------------------
metric_total = Table(
    # One row per counter series, histogram bucket, sum and count; added to in the same transaction
    # as the work it counts, so a total never goes down (archiving, restarts). labels: canonical JSON.
    "metric_total",
    metadata,
    Column("name", Text, nullable=False),
    Column("labels", Text, nullable=False, server_default=text("'{}'")),
    Column("value", Float, nullable=False, server_default=text("0")),
    PrimaryKeyConstraint("name", "labels", name="metric_total_pkey"),
)


# --- the worst of each hour (migration 0019; owner: store/parallel_run.py) --------------------------
parallel_run_hour = Table(
    # One row per hour: the highest dead-letter backlog and the longest wait of the oldest undelivered
    # event the health tick saw in it (every 30 s), folded in as a maximum.
    "parallel_run_hour",
    metadata,
    _ts("hour", primary_key=True),                  # the hour's start (UTC)
    Column("dlq_max", Integer, nullable=False),
    Column("dwell_max_s", Float, nullable=False),
    Column("readings", Integer, nullable=False),    # how many health ticks folded into it
    _ts("first_at", nullable=False),
    _ts("last_at", nullable=False),
)


# --- cut-over and rollback (migration 0015; owner: store/cutover_state.py) -------------------------
cutover_state = Table(
    # One row once a cut-over command ran here: the installation's role, whether it gave up the right
    # to process and mark the mailbox (and at which watermark), and the watermark it went on from.
    "cutover_state",
    metadata,
    Column("name", Text, primary_key=True),
    Column("role", Text, nullable=False),           # production | shadow
    Column("writes", Text, nullable=False),         # open | stopped
    Column("watermark", BigInteger),                # stopped: the highest mailbox id finished here
    Column("took_over_at", BigInteger),             # the other installation's watermark this one went on from
    Column("audit_id", BigInteger),
    _ts("updated_at", nullable=False, server_default=func.now()),
)


# --- versions above what another installation published (migration 0018; owner: store/version_floor.py)
version_floor = Table(
    # Per flight this database has no row for: the highest STATE_VERSION published elsewhere (another
    # installation, or this one before a restore). Its first write here starts above it (decision O19, version floor).
    "version_floor",
    metadata,
    Column("flid", Text, primary_key=True),
    Column("state_version", BigInteger, nullable=False),
    _ts("updated_at", nullable=False, server_default=func.now()),
)
