"""Identity bindings within a window (D26, INV-9, US-03 AC3), keyed by a fixed-size hash.

- ``msg_identity``: one row per business identity ``SNDR|TYPE|STYP|SEQN``, keyed by the SHA-256
  hex of its text (so no identity can overflow a btree index), with the readable text, the bound
  mailbox id, its payload hash and registration time (the window is measured on it).
- The unique constraint on ``proc_state.identity_key`` goes: the column stays as the readable
  identity of each message, and the same identity may now bind again once its window has passed.
- Existing bindings are copied over (the constraint made them unique).

Downgrade restores the constraint, which fails if an identity was bound again after its window.

Revision ID: 0009
Revises: 0008
"""
import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "msg_identity",
        sa.Column("identity_hash", sa.Text(), nullable=False),
        sa.Column("identity", sa.Text(), nullable=False),
        sa.Column("msg_id", sa.BigInteger(), nullable=False),
        sa.Column("payload_hash", sa.Text(), nullable=True),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("bound_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("identity_hash"),
    )
    op.create_index("msg_identity_registered_idx", "msg_identity", ["registered_at"])
    op.execute(
        "INSERT INTO msg_identity (identity_hash, identity, msg_id, payload_hash, registered_at, bound_at) "
        "SELECT encode(sha256(convert_to(identity_key, 'UTF8')), 'hex'), identity_key, msg_id, payload_hash, "
        "created_at, coalesce(applied_at, terminal_at, updated_at) FROM proc_state "
        "WHERE identity_key IS NOT NULL ON CONFLICT (identity_hash) DO NOTHING")
    op.drop_constraint("proc_state_identity_key_key", "proc_state", type_="unique")


def downgrade() -> None:
    op.create_unique_constraint("proc_state_identity_key_key", "proc_state", ["identity_key"])
    op.drop_index("msg_identity_registered_idx", table_name="msg_identity")
    op.drop_table("msg_identity")
