"""The intake's durable high-water mark: the largest mailbox id this state database accounts for.

Every mailbox row at or below it is registered here, a recorded gap, or was already processed when
msgx adopted the mailbox. A processed (marked) row above it, or a recorded gap that turns up
marked, is work this database does not know: a restore from an older backup (or another
installation) and the pump refuses to go on until ``msgx recover`` replays it. NULL until the
first intake pass adopts the mailbox.

Revision ID: 0011
Revises: 0010
"""
import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("intake_state", sa.Column("high_water", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    op.drop_column("intake_state", "high_water")
