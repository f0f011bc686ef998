"""Request tracking (D16, US-08 AC2, C-24): the outbound SEQN counter and the intended SEQN on
each request.

- ``req_seqn``: the 6-digit META SEQN counter of outbound requests (000001..999999, then it
  cycles, as the peer's Redis counter does; catalogue §6).
- ``req_track.seqn``: the SEQN a request is (about to be) sent with, committed *before* the
  COUTMSGS insert so that recovery can look the row up instead of blindly resending (AC2).

One open request per (rtype, styp) (AC3) is kept by the tracker's per-kind transaction lock, not
by a unique index: tests of the answer lines build such rows by hand.

Revision ID: 0005
Revises: 0004
"""
import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE SEQUENCE req_seqn MINVALUE 1 MAXVALUE 999999 CYCLE")
    op.add_column("req_track", sa.Column("seqn", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("req_track", "seqn")
    op.execute("DROP SEQUENCE req_seqn")
