"""The operator audit trail and the replay's own deadline (US-10 AC1/AC3/AC5).

- ``operator_audit``: one row per operator request (replay, skip, recover, archive, ...): who,
  why, when, the selection or arguments (JSON) and a summary of what came of it (JSON).
- ``operator_audit_item``: the per-message result of a request (status before and after).
- ``proc_state.requeued_at``: when an operator last re-queued the message; its retry deadline
  counts from here, while ``created_at`` keeps the original registration time.

Revision ID: 0006
Revises: 0005
"""
import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "operator_audit",
        sa.Column("audit_id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("operator", sa.Text(), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("selection", sa.Text(), nullable=True),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("audit_id"),
    )
    op.create_table(
        "operator_audit_item",
        sa.Column("audit_id", sa.BigInteger(), nullable=False),
        sa.Column("msg_id", sa.BigInteger(), nullable=False),
        sa.Column("before_status", sa.Text(), nullable=True),
        sa.Column("after_status", sa.Text(), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("audit_id", "msg_id"),
    )
    op.create_index("operator_audit_item_msg_idx", "operator_audit_item", ["msg_id"])
    op.add_column("proc_state", sa.Column("requeued_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("proc_state", "requeued_at")
    op.drop_index("operator_audit_item_msg_idx", table_name="operator_audit_item")
    op.drop_table("operator_audit_item")
    op.drop_table("operator_audit")
