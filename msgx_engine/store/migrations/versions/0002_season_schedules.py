"""Snapshot run records and seasonal schedules.

``schd_gen_run``: one row per accepted SCHD snapshot (counts, flights left to a later day, D3).
``season_*``: SCHS seasons keyed by (SNAM, SDAT, EDAT), each replaced whole; never flight_schd.

Revision ID: 0002
Revises: 0001
"""
import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('schd_gen_run',
    sa.Column('msg_id', sa.BigInteger(), autoincrement=False, nullable=False),
    sa.Column('fday', sa.Date(), nullable=False),
    sa.Column('version', sa.BigInteger(), nullable=False),
    sa.Column('styp', sa.Text(), nullable=False),
    sa.Column('flights', sa.Integer(), nullable=False),
    sa.Column('written', sa.Integer(), nullable=False),
    sa.Column('deleted', sa.Integer(), nullable=False),
    sa.Column('kept_later', sa.Integer(), nullable=False),
    sa.Column('kept_later_flids', sa.Text(), nullable=True),
    sa.Column('req_id', sa.BigInteger(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.PrimaryKeyConstraint('msg_id')
    )
    op.create_table('season_flight',
    sa.Column('snam', sa.Text(), nullable=False),
    sa.Column('sdat', sa.Text(), nullable=False),
    sa.Column('edat', sa.Text(), nullable=False),
    sa.Column('ordinal', sa.Integer(), nullable=False),
    sa.Column('alcd', sa.Text(), nullable=True),
    sa.Column('flno', sa.Text(), nullable=True),
    sa.Column('mvin', sa.Text(), nullable=True),
    sa.Column('stdt', sa.Text(), nullable=True),
    sa.Column('eddt', sa.Text(), nullable=True),
    sa.Column('dyop', sa.Text(), nullable=True),
    sa.Column('scht', sa.Text(), nullable=True),
    sa.Column('flty', sa.Text(), nullable=True),
    sa.Column('flin', sa.Text(), nullable=True),
    sa.Column('acft', sa.Text(), nullable=True),
    sa.Column('reno', sa.Text(), nullable=True),
    sa.Column('taop', sa.Text(), nullable=True),
    sa.Column('tafl', sa.Text(), nullable=True),
    sa.Column('trml', sa.Text(), nullable=True),
    sa.Column('maxp', sa.Text(), nullable=True),
    sa.Column('csop', sa.Text(), nullable=True),
    sa.Column('csft', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('snam', 'sdat', 'edat', 'ordinal', name='season_flight_pkey')
    )
    op.create_table('season_route_point',
    sa.Column('snam', sa.Text(), nullable=False),
    sa.Column('sdat', sa.Text(), nullable=False),
    sa.Column('edat', sa.Text(), nullable=False),
    sa.Column('flight_ordinal', sa.Integer(), nullable=False),
    sa.Column('route_kind', sa.Text(), nullable=False),
    sa.Column('ordinal', sa.Integer(), nullable=False),
    sa.Column('source_seq', sa.Text(), nullable=True),
    sa.Column('apcd', sa.Text(), nullable=True),
    sa.Column('scat', sa.Text(), nullable=True),
    sa.Column('scdt', sa.Text(), nullable=True),
    sa.Column('sadc', sa.Text(), nullable=True),
    sa.Column('sddc', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('snam', 'sdat', 'edat', 'flight_ordinal', 'route_kind', 'ordinal', name='season_route_point_pkey')
    )
    op.create_table('season_sched',
    sa.Column('snam', sa.Text(), nullable=False),
    sa.Column('sdat', sa.Text(), nullable=False),
    sa.Column('edat', sa.Text(), nullable=False),
    sa.Column('apcd', sa.Text(), nullable=True),
    sa.Column('recs', sa.Integer(), nullable=False),
    sa.Column('version', sa.BigInteger(), nullable=False),
    sa.Column('last_message_id', sa.BigInteger(), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.PrimaryKeyConstraint('snam', 'sdat', 'edat', name='season_sched_pkey')
    )


def downgrade() -> None:
    op.drop_table('season_sched')
    op.drop_table('season_route_point')
    op.drop_table('season_flight')
    op.drop_table('schd_gen_run')
