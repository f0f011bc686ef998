"""Index code-share children by MAID (the FDEL cascade looks them up; INV-21/22).

Revision ID: 0003
Revises: 0002
"""
import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("flight_schd_maid_idx", "flight_schd", ["maid"], unique=False,
                    postgresql_where=sa.text("maid IS NOT NULL"))


def downgrade() -> None:
    op.drop_index("flight_schd_maid_idx", table_name="flight_schd",
                  postgresql_where=sa.text("maid IS NOT NULL"))
