"""Requests another installation sent, read from the mailbox, and when a row brought over from
another installation arrived (decision L16).

``req_track.adopted`` is true for a request this installation found in COUTMSGS and did not write
itself (a shadow's record of production's request, the old installation's record of the promoted
one's after a rollback). It keeps them apart from the requests this installation sent: a state
database that sent requests to the AODB is production's (a shadow refuses it), one that only read
them is not. A request is adopted once (a unique index on its COUTMSGS id), however many pumps
read it.

``proc_state.arrived_at`` (and its archive copy) is when a row registered here after the fact
(brought over by a rollback, found again by ``msgx recover``) arrived at the installation that
processed it first; an answer among them is judged late or in time by it, not by this later
registration. NULL: the row arrived when it was registered here.

Revision ID: 0021
Revises: 0020
"""
import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("req_track", sa.Column("adopted", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.execute("CREATE UNIQUE INDEX req_track_adopted_idx ON req_track (coutmsgs_id) WHERE adopted")
    for table in ("proc_state", "proc_state_archive"):
        op.add_column(table, sa.Column("arrived_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    for table in ("proc_state_archive", "proc_state"):
        op.drop_column(table, "arrived_at")
    op.execute("DROP INDEX req_track_adopted_idx")
    op.drop_column("req_track", "adopted")
