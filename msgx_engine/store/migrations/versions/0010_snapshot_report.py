"""Reconciliation report on every daily snapshot: ``schd_gen_run.report`` (JSON text; NULL for
runs recorded before this revision). One row per accepted snapshot already exists there, so the
report joins it rather than a table of its own (docs/snapshots.md).

Revision ID: 0010
Revises: 0009
"""
import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("schd_gen_run", sa.Column("report", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("schd_gen_run", "report")
