"""Versions that only grow on the production topics, whoever publishes (decision O19):
``version_floor`` holds, per flight this state database has no row for, the highest
``STATE_VERSION`` another installation (or this one before a restore) published for it. The
cut-over commands and ``msgx recover`` fill it; the writer starts such a flight above it when it
first writes it, so a consumer that keeps the highest version per flight takes the change.

Revision ID: 0018
Revises: 0017
"""
import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "version_floor",
        sa.Column("flid", sa.Text(), primary_key=True),
        sa.Column("state_version", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )


def downgrade() -> None:
    op.drop_table("version_floor")
