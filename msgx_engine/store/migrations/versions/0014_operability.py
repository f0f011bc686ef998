"""Operability: dead letters an operator can close, alerts that repeat on a rising count, and
durable metric totals.

- ``proc_state.acknowledged_at`` / ``acknowledged_by`` (and the same columns in its archive copy):
  an operator closed this DEAD or SKIPPED(unsupported) message without replaying it. It leaves the
  dead-letter count, stays queryable, and may be archived. An unacknowledged one is kept out of
  archiving until it is replayed, skipped or acknowledged. A partial index keeps the "waiting for an
  operator" set cheap to count and list.
- ``alert_state.notified_value`` / ``notified_detail``: the headline figure (and the ids) the last
  alert was sent for, so a failing check whose count rises alerts again, naming the new ids.
- ``metric_total``: one row per counter series (and per histogram bucket, sum and count), added to in
  the same transaction as the work it counts, so ``/metrics`` totals never go down: not when
  archiving moves rows, not on a restart. ``labels`` is the series' labels as canonical JSON text.
  A low fill factor keeps its hot rows' updates on the same page (HOT updates, no index churn).

Revision ID: 0014
Revises: 0013
"""
import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

ATTENTION_WHERE = ("acknowledged_at IS NULL AND (status = 'DEAD' "
                   "OR (status = 'SKIPPED' AND reason = 'unsupported'))")


def upgrade() -> None:
    ts = sa.DateTime(timezone=True)
    for table in ("proc_state", "proc_state_archive"):
        op.add_column(table, sa.Column("acknowledged_at", ts, nullable=True))
        op.add_column(table, sa.Column("acknowledged_by", sa.Text(), nullable=True))
    op.create_index("proc_state_attention_idx", "proc_state", ["msg_id"],
                    postgresql_where=sa.text(ATTENTION_WHERE))
    op.add_column("alert_state", sa.Column("notified_value", sa.Float(), nullable=True))
    op.add_column("alert_state", sa.Column("notified_detail", sa.Text(), nullable=True))
    op.create_table(
        "metric_total",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("labels", sa.Text(), nullable=False, server_default=sa.text("'{}'")),
        sa.Column("value", sa.Float(), nullable=False, server_default=sa.text("0")),
        sa.PrimaryKeyConstraint("name", "labels", name="metric_total_pkey"),
    )
    op.execute("ALTER TABLE metric_total SET (fillfactor = 50)")


def downgrade() -> None:
    op.drop_table("metric_total")
    op.drop_column("alert_state", "notified_detail")
    op.drop_column("alert_state", "notified_value")
    op.drop_index("proc_state_attention_idx", table_name="proc_state")
    for table in ("proc_state_archive", "proc_state"):
        op.drop_column(table, "acknowledged_by")
        op.drop_column(table, "acknowledged_at")
