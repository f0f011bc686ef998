"""Cut-over and rollback (OPS-4, PRE-1): ``cutover_state``, one row per state database saying which
role the installation plays since a cut-over command ran (production or shadow), whether it has
given up the right to process and mark the mailbox (writes open, stopped at which watermark, or
rolling back to it), and from which watermark it went on when it took the right over. No row: an
installation no cut-over command or shadow has touched, which runs as ``MSGX_MODE`` says.

Revision ID: 0015
Revises: 0014
"""
import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cutover_state",
        sa.Column("name", sa.Text(), primary_key=True),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("writes", sa.Text(), nullable=False),
        sa.Column("watermark", sa.BigInteger()),
        sa.Column("took_over_at", sa.BigInteger()),
        sa.Column("audit_id", sa.BigInteger()),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )


def downgrade() -> None:
    op.drop_table("cutover_state")
