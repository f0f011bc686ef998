"""Archive tables (US-11, FS §3.6/§7, INV-25): terminal messages leave the online tables.

``proc_state_archive`` (with the message's mark outcome), ``proc_state_hst_archive`` and
``msg_event_archive`` hold what archiving moved, column for column, in this same database. The
archive keeps the mailbox ids, so intake never registers an archived id again.

Revision ID: 0008
Revises: 0007
"""
import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def _ts(name: str, nullable: bool = True, **kw) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable, **kw)


def upgrade() -> None:
    op.create_table(
        "proc_state_archive",
        sa.Column("msg_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("error_class", sa.Text(), nullable=True),
        sa.Column("error_detail", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        _ts("next_attempt_at"),
        _ts("created_at", nullable=False),
        _ts("applied_at"),
        _ts("terminal_at"),
        _ts("updated_at", nullable=False),
        sa.Column("identity_key", sa.Text(), nullable=True),
        sa.Column("payload_hash", sa.Text(), nullable=True),
        sa.Column("dup_of", sa.BigInteger(), nullable=True),
        sa.Column("msg_type", sa.Text(), nullable=True),
        sa.Column("msg_styp", sa.Text(), nullable=True),
        sa.Column("late_arrival", sa.Boolean(), nullable=False),
        _ts("requeued_at"),
        sa.Column("mark_status", sa.Text(), nullable=True),
        _ts("marked_at"),
        _ts("archived_at", nullable=False, server_default=sa.text("now()")),
        sa.PrimaryKeyConstraint("msg_id"),
    )
    op.create_table(
        "proc_state_hst_archive",
        sa.Column("id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("msg_id", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("error_class", sa.Text(), nullable=True),
        sa.Column("error_detail", sa.Text(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=True),
        _ts("at", nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("proc_state_hst_archive_msg_idx", "proc_state_hst_archive", ["msg_id"])
    op.create_table(
        "msg_event_archive",
        sa.Column("event_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("msg_id", sa.BigInteger(), nullable=False),
        sa.Column("flid", sa.Text(), nullable=False),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("state_version", sa.BigInteger(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        _ts("created_at", nullable=False),
        _ts("released_at"),
        _ts("sent_at"),
        sa.Column("send_attempts", sa.Integer(), nullable=False),
        _ts("next_send_at"),
        sa.Column("send_error", sa.Text(), nullable=True),
        _ts("dead_at"),
        sa.PrimaryKeyConstraint("event_id"),
    )
    op.create_index("msg_event_archive_msg_idx", "msg_event_archive", ["msg_id"])
    op.create_index("msg_event_archive_flid_idx", "msg_event_archive", ["flid", "msg_id"])


def downgrade() -> None:
    op.drop_index("msg_event_archive_flid_idx", table_name="msg_event_archive")
    op.drop_index("msg_event_archive_msg_idx", table_name="msg_event_archive")
    op.drop_table("msg_event_archive")
    op.drop_index("proc_state_hst_archive_msg_idx", table_name="proc_state_hst_archive")
    op.drop_table("proc_state_hst_archive")
    op.drop_table("proc_state_archive")
