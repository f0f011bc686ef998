"""The worst of each hour for the parallel run and the observation after a cut-over.

``parallel_run_hour`` keeps, per hour, the highest dead-letter backlog and the longest wait of the
oldest undelivered event that the health tick saw (every 30 s), folded in as a maximum: a
comparison samples once an hour, and a 45-minute Kafka outage between two samples would otherwise
leave no trace in the go-live verdict. One small row per hour (``store.parallel_run``).

Revision ID: 0019
Revises: 0018
"""
import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "parallel_run_hour",
        sa.Column("hour", sa.DateTime(timezone=True), primary_key=True),
        sa.Column("dlq_max", sa.Integer, nullable=False),
        sa.Column("dwell_max_s", sa.Float, nullable=False),
        sa.Column("readings", sa.Integer, nullable=False),
        sa.Column("first_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("parallel_run_hour")
