"""Requests another installation sent, read from the mailbox (decision L16).

``req_track.adopted`` is true for a request this installation found in COUTMSGS and did not write
itself (a shadow's record of production's request, the old installation's record of the promoted
one's after a rollback). It keeps them apart from the requests this installation sent: a state
database that sent requests to the AODB is production's (a shadow refuses it), one that only read
them is not. A request is adopted once (a unique index on its COUTMSGS id), however many pumps
read it.

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
    op.add_column("req_track", sa.Column("adopted", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.execute("CREATE UNIQUE INDEX req_track_adopted_idx ON req_track (coutmsgs_id) WHERE adopted")


def downgrade() -> None:
    op.execute("DROP INDEX req_track_adopted_idx")
    op.drop_column("req_track", "adopted")
