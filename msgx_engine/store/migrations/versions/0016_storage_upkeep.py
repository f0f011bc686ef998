"""Storage upkeep of the tables every message rewrites: room for HOT updates, and autovacuum that
keeps up with a steady stream instead of waiting for a fifth of a table to be dead.

Every message writes its ``proc_state`` row two or three times (registration, applied, terminal),
its outbox rows in ``msg_event`` two or three times (written, released, sent), its flight's row in
``flight_schd``, a ``backfill_todo`` row twice, and replaces the flight's detail rows. Each
rewrite leaves the old version behind. Where no indexed column changes, PostgreSQL can put the new
version on the same page (a HOT update: no new index entries, and the page reclaims its own dead
versions the next time it is read, without VACUUM), but only if the page has room: a table filled
to 100 % sends almost every new version to the end of the table, with a new entry in every index.
So these tables keep part of each page free (``fillfactor``). ``proc_state`` fills 40 %: its row
nearly doubles when transaction 1 writes the applied columns (type, identity, payload hash), and
only at 40 % did every one of those updates stay on its page (70 %: a third; 100 %: none).
``msg_event`` fills 60 %: its rows are large (the whole flight state), and the reserve takes one
rewritten copy of most of a page's rows; more would double the outbox a delivery outage fills.
``flight_schd`` fills 70 % (rows rewritten one at a time, pruned between). ``metric_total`` has
kept half of each page free since 0014.

The statuses that are indexed (``proc_state.status`` for the open and attention indexes,
``msg_event.sent_at`` for the unsent index, ``backfill_todo.status`` for the pending index) still
leave a dead entry in those partial indexes when a row leaves them; the queue head, the
dispatcher and the backfill read those indexes from their start, so those entries cost every
pass until VACUUM removes them. PostgreSQL's defaults vacuum a table once a fifth of it is dead:
for a table of millions of rows that is hours of traffic, so each of these tables is vacuumed
once about a thousand rows (plus 1-2 % of the table) are dead, and the insert-only history tables
once 5 % are new. These settings take effect only where autovacuum runs (it does by default;
``docs/operations.md``). ``ALTER TABLE ... SET (fillfactor)`` applies to pages written from now on.

Revision ID: 0016
Revises: 0015
"""
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

# vacuum once about a thousand rows (plus 1-2 % of the table) are dead or new
_CHURN = {"autovacuum_vacuum_scale_factor": "0.02", "autovacuum_vacuum_threshold": "1000",
          "autovacuum_vacuum_insert_scale_factor": "0.05", "autovacuum_analyze_scale_factor": "0.02"}
# a few rows rewritten many times a second: vacuum after a few hundred dead versions
_TINY = {"autovacuum_vacuum_scale_factor": "0", "autovacuum_vacuum_threshold": "200"}
_DETAIL = ("flight_gate", "flight_checkin", "flight_belt", "flight_stand_plan", "flight_chute", "flight_delay",
           "flight_bridge_op", "flight_chock_op", "flight_route_point")

STORAGE: dict[str, dict[str, str]] = {
    "proc_state": {"fillfactor": "40", **_CHURN},
    "msg_event": {"fillfactor": "60", **_CHURN},
    "flight_schd": {"fillfactor": "70", **_CHURN},
    "backfill_todo": _CHURN,
    "proc_state_hst": _CHURN,
    "msg_identity": _CHURN,
    **{name: _CHURN for name in _DETAIL},
    "metric_total": _TINY,
    "intake_state": _TINY,
    "heartbeat": _TINY,
    "pipeline_lock": _TINY,
}


def upgrade() -> None:
    for table, params in STORAGE.items():
        op.execute(f"ALTER TABLE {table} SET ({', '.join(f'{k} = {v}' for k, v in params.items())})")


def downgrade() -> None:
    for table, params in STORAGE.items():
        reset = [k for k in params if not (table == "metric_total" and k == "fillfactor")]
        op.execute(f"ALTER TABLE {table} RESET ({', '.join(reset)})")
