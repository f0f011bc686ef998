"""The dispatcher's last send error, where every process reads it (decision M27): ``kafka_status``, one
row per installation's dispatcher: the broker address it sends to, the last error a send ended with
(the client's own words about the broker: "Connect to 127.0.0.1:9092 failed: Connection refused")
and when, and when it delivered again after that error. ``msgx outbox``, the ``delivery_backlog``
check and its alert show it; before, that text was only in the dispatching process's stderr.

Revision ID: 0020
Revises: 0019
"""
import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "kafka_status",
        sa.Column("name", sa.Text(), primary_key=True),
        sa.Column("broker", sa.Text(), nullable=False),
        sa.Column("last_error", sa.Text()),
        sa.Column("error_at", sa.DateTime(timezone=True)),
        sa.Column("delivered_at", sa.DateTime(timezone=True)),
    )


def downgrade() -> None:
    op.drop_table("kafka_status")
