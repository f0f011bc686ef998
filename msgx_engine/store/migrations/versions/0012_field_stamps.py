"""Last writer wins by mailbox id (docs/decisions.md F6): ``flight_schd.field_msg``, per flight the
mailbox id that last wrote each field key (``*``: the last message that wrote them all, a snapshot)
and under ``DELETED`` the one that last deleted or restored the flight. NULL for rows written before
this column: every key counts as stamped 0, so any message may write it.

Revision ID: 0012
Revises: 0011
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("flight_schd", sa.Column("field_msg", postgresql.JSONB(), nullable=True))


def downgrade() -> None:
    op.drop_column("flight_schd", "field_msg")
