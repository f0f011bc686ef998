"""Monitoring state (OPS-2): ``alert_state``, one row per health check with its last evaluation and
the state last announced to the alert webhook, so a state change is alerted once across runs; and
``heartbeat``, the last loop report of each long-lived worker (the pump), read by ``/metrics``.

Revision ID: 0013
Revises: 0012
"""
import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    ts = sa.DateTime(timezone=True)
    op.create_table(
        "alert_state",
        sa.Column("check_name", sa.Text(), primary_key=True),
        sa.Column("failing", sa.Boolean(), nullable=False),
        sa.Column("since", ts, nullable=False),
        sa.Column("evaluated_at", ts, nullable=False),
        sa.Column("summary", sa.Text()),
        sa.Column("value", sa.Float()),
        sa.Column("notified_failing", sa.Boolean()),
        sa.Column("notified_at", ts),
        sa.Column("notify_error", sa.Text()),
    )
    op.create_table(
        "heartbeat",
        sa.Column("component", sa.Text(), primary_key=True),
        sa.Column("pid", sa.Integer()),
        sa.Column("host", sa.Text()),
        sa.Column("started_at", ts),
        sa.Column("beat_at", ts, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("heartbeat")
    op.drop_table("alert_state")
