"""Initial schema: flight state, detail tables, ledgers, pipeline and outbox tables (DESIGN §4).

Generated from msgx_engine.store.tables at revision 0001 and frozen here; later changes go in
new revisions.

Revision ID: 0001
Revises:
"""
import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('backfill_todo',
    sa.Column('msg_id', sa.BigInteger(), autoincrement=False, nullable=False),
    sa.Column('status', sa.Text(), server_default=sa.text("'PENDING'"), nullable=False),
    sa.Column('attempts', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('next_attempt_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('done_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('msg_id')
    )
    op.create_index('backfill_todo_pending_idx', 'backfill_todo', ['msg_id'], unique=False, postgresql_where=sa.text("status = 'PENDING'"))
    op.create_table('flight_belt',
    sa.Column('flid', sa.Text(), nullable=False),
    sa.Column('ordinal', sa.Integer(), nullable=False),
    sa.Column('source_seq', sa.Text(), nullable=True),
    sa.Column('record_version', sa.BigInteger(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('belt', sa.Text(), nullable=True),
    sa.Column('bcls', sa.Text(), nullable=True),
    sa.Column('pcot', sa.Text(), nullable=True),
    sa.Column('pcct', sa.Text(), nullable=True),
    sa.Column('btyp', sa.Text(), nullable=True),
    sa.Column('fbag', sa.Text(), nullable=True),
    sa.Column('lbag', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('flid', 'ordinal', name='flight_belt_pkey')
    )
    op.create_table('flight_bridge_op',
    sa.Column('flid', sa.Text(), nullable=False),
    sa.Column('ordinal', sa.Integer(), nullable=False),
    sa.Column('source_seq', sa.Text(), nullable=True),
    sa.Column('record_version', sa.BigInteger(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('abdg', sa.Text(), nullable=True),
    sa.Column('abop', sa.Text(), nullable=True),
    sa.Column('aotm', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('flid', 'ordinal', name='flight_bridge_op_pkey')
    )
    op.create_table('flight_checkin',
    sa.Column('flid', sa.Text(), nullable=False),
    sa.Column('ordinal', sa.Integer(), nullable=False),
    sa.Column('source_seq', sa.Text(), nullable=True),
    sa.Column('record_version', sa.BigInteger(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('chkc', sa.Text(), nullable=True),
    sa.Column('ccls', sa.Text(), nullable=True),
    sa.Column('pcot', sa.Text(), nullable=True),
    sa.Column('pcct', sa.Text(), nullable=True),
    sa.Column('cotm', sa.Text(), nullable=True),
    sa.Column('cctm', sa.Text(), nullable=True),
    sa.Column('ctyp', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('flid', 'ordinal', name='flight_checkin_pkey')
    )
    op.create_table('flight_chock_op',
    sa.Column('flid', sa.Text(), nullable=False),
    sa.Column('ordinal', sa.Integer(), nullable=False),
    sa.Column('source_seq', sa.Text(), nullable=True),
    sa.Column('record_version', sa.BigInteger(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('chtm', sa.Text(), nullable=True),
    sa.Column('chid', sa.Text(), nullable=True),
    sa.Column('chst', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('flid', 'ordinal', name='flight_chock_op_pkey')
    )
    op.create_table('flight_chute',
    sa.Column('flid', sa.Text(), nullable=False),
    sa.Column('ordinal', sa.Integer(), nullable=False),
    sa.Column('source_seq', sa.Text(), nullable=True),
    sa.Column('record_version', sa.BigInteger(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('chut', sa.Text(), nullable=True),
    sa.Column('ccls', sa.Text(), nullable=True),
    sa.Column('pcbt', sa.Text(), nullable=True),
    sa.Column('pcet', sa.Text(), nullable=True),
    sa.Column('cbtm', sa.Text(), nullable=True),
    sa.Column('cetm', sa.Text(), nullable=True),
    sa.Column('ctyp', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('flid', 'ordinal', name='flight_chute_pkey')
    )
    op.create_table('flight_delay',
    sa.Column('flid', sa.Text(), nullable=False),
    sa.Column('ordinal', sa.Integer(), nullable=False),
    sa.Column('source_seq', sa.Text(), nullable=True),
    sa.Column('record_version', sa.BigInteger(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('code', sa.Text(), nullable=True),
    sa.Column('strt', sa.Text(), nullable=True),
    sa.Column('dura', sa.Text(), nullable=True),
    sa.Column('text', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('flid', 'ordinal', name='flight_delay_pkey')
    )
    op.create_table('flight_gate',
    sa.Column('flid', sa.Text(), nullable=False),
    sa.Column('ordinal', sa.Integer(), nullable=False),
    sa.Column('source_seq', sa.Text(), nullable=True),
    sa.Column('record_version', sa.BigInteger(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('gate', sa.Text(), nullable=True),
    sa.Column('pgot', sa.Text(), nullable=True),
    sa.Column('pgct', sa.Text(), nullable=True),
    sa.Column('gotm', sa.Text(), nullable=True),
    sa.Column('gctm', sa.Text(), nullable=True),
    sa.Column('gtyp', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('flid', 'ordinal', name='flight_gate_pkey')
    )
    op.create_table('flight_route_point',
    sa.Column('flid', sa.Text(), nullable=False),
    sa.Column('route_kind', sa.Text(), nullable=False),
    sa.Column('ordinal', sa.Integer(), nullable=False),
    sa.Column('source_seq', sa.Text(), nullable=True),
    sa.Column('record_version', sa.BigInteger(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('apcd', sa.Text(), nullable=True),
    sa.Column('scat', sa.Text(), nullable=True),
    sa.Column('scdt', sa.Text(), nullable=True),
    sa.Column('sadc', sa.Text(), nullable=True),
    sa.Column('sddc', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('flid', 'route_kind', 'ordinal', name='flight_route_point_pkey')
    )
    op.create_table('flight_schd',
    sa.Column('flid', sa.Text(), nullable=False),
    sa.Column('fday', sa.Date(), nullable=True),
    sa.Column('state_version', sa.BigInteger(), server_default=sa.text('0'), nullable=False),
    sa.Column('last_message_id', sa.BigInteger(), nullable=True),
    sa.Column('deleted', sa.Boolean(), server_default=sa.text('false'), nullable=False),
    sa.Column('deleted_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('ffid', sa.Text(), nullable=True),
    sa.Column('alcd', sa.Text(), nullable=True),
    sa.Column('flno', sa.Text(), nullable=True),
    sa.Column('mvin', sa.Text(), nullable=True),
    sa.Column('sodt', sa.Text(), nullable=True),
    sa.Column('flty', sa.Text(), nullable=True),
    sa.Column('flin', sa.Text(), nullable=True),
    sa.Column('acft', sa.Text(), nullable=True),
    sa.Column('reno', sa.Text(), nullable=True),
    sa.Column('alsc', sa.Text(), nullable=True),
    sa.Column('taop', sa.Text(), nullable=True),
    sa.Column('tafl', sa.Text(), nullable=True),
    sa.Column('taid', sa.Text(), nullable=True),
    sa.Column('trml', sa.Text(), nullable=True),
    sa.Column('maxp', sa.Text(), nullable=True),
    sa.Column('stnd', sa.Text(), nullable=True),
    sa.Column('phag', sa.Text(), nullable=True),
    sa.Column('fhag', sa.Text(), nullable=True),
    sa.Column('mhag', sa.Text(), nullable=True),
    sa.Column('exsc', sa.Text(), nullable=True),
    sa.Column('exsr', sa.Text(), nullable=True),
    sa.Column('ftss', sa.Text(), nullable=True),
    sa.Column('csop', sa.Text(), nullable=True),
    sa.Column('csft', sa.Text(), nullable=True),
    sa.Column('maid', sa.Text(), nullable=True),
    sa.Column('estt', sa.Text(), nullable=True),
    sa.Column('actt', sa.Text(), nullable=True),
    sa.Column('cncl', sa.Text(), nullable=True),
    sa.Column('remc', sa.Text(), nullable=True),
    sa.Column('botm', sa.Text(), nullable=True),
    sa.Column('lacl', sa.Text(), nullable=True),
    sa.Column('fint', sa.Text(), nullable=True),
    sa.Column('appt', sa.Text(), nullable=True),
    sa.Column('egsr', sa.Text(), nullable=True),
    sa.Column('egst', sa.Text(), nullable=True),
    sa.Column('vipp', sa.Text(), nullable=True),
    sa.Column('vipr', sa.Text(), nullable=True),
    sa.Column('lbno', sa.Text(), nullable=True),
    sa.Column('lbwt', sa.Text(), nullable=True),
    sa.Column('paxc', sa.Text(), nullable=True),
    sa.Column('pedt', sa.Text(), nullable=True),
    sa.Column('neat', sa.Text(), nullable=True),
    sa.Column('padt', sa.Text(), nullable=True),
    sa.Column('naat', sa.Text(), nullable=True),
    sa.Column('cobt', sa.Text(), nullable=True),
    sa.Column('tobt', sa.Text(), nullable=True),
    sa.Column('eobt', sa.Text(), nullable=True),
    sa.Column('iest', sa.Text(), nullable=True),
    sa.Column('runw', sa.Text(), nullable=True),
    sa.Column('ctot', sa.Text(), nullable=True),
    sa.Column('fdiv_ddes', sa.Text(), nullable=True),
    sa.Column('fdiv_ddir', sa.Text(), nullable=True),
    sa.Column('fdiv_text', sa.Text(), nullable=True),
    sa.Column('fret_reid', sa.Text(), nullable=True),
    sa.Column('fret_text', sa.Text(), nullable=True),
    sa.Column('flab_ares', sa.Text(), nullable=True),
    sa.Column('flab_text', sa.Text(), nullable=True),
    sa.Column('port_potm', sa.Text(), nullable=True),
    sa.Column('port_poid', sa.Text(), nullable=True),
    sa.Column('srvt_text', sa.Text(), nullable=True),
    sa.Column('vipf_text', sa.Text(), nullable=True),
    sa.Column('psht_text', sa.Text(), nullable=True),
    sa.Column('tipt_text', sa.Text(), nullable=True),
    sa.Column('mafl_text', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('flid')
    )
    op.create_table('flight_stand_plan',
    sa.Column('flid', sa.Text(), nullable=False),
    sa.Column('ordinal', sa.Integer(), nullable=False),
    sa.Column('source_seq', sa.Text(), nullable=True),
    sa.Column('record_version', sa.BigInteger(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('psst', sa.Text(), nullable=True),
    sa.Column('stst', sa.Text(), nullable=True),
    sa.Column('stet', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('flid', 'ordinal', name='flight_stand_plan_pkey')
    )
    op.create_table('intake_gap',
    sa.Column('msg_id', sa.BigInteger(), autoincrement=False, nullable=False),
    sa.Column('first_seen_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('passed_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('arrived_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('msg_id')
    )
    op.create_table('intake_state',
    sa.Column('name', sa.Text(), nullable=False),
    sa.Column('low_water', sa.BigInteger(), server_default=sa.text('0'), nullable=False),
    sa.Column('last_full_scan_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('msg_event',
    sa.Column('event_id', sa.BigInteger(), autoincrement=True, nullable=False),
    sa.Column('msg_id', sa.BigInteger(), nullable=False),
    sa.Column('flid', sa.Text(), nullable=False),
    sa.Column('topic', sa.Text(), nullable=False),
    sa.Column('kind', sa.Text(), nullable=False),
    sa.Column('state_version', sa.BigInteger(), nullable=False),
    sa.Column('payload', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('released_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('sent_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('send_attempts', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('next_send_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('send_error', sa.Text(), nullable=True),
    sa.Column('dead_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('event_id')
    )
    op.create_index('msg_event_msg_idx', 'msg_event', ['msg_id'], unique=False)
    op.create_index('msg_event_unsent_idx', 'msg_event', ['topic', 'event_id'], unique=False, postgresql_where=sa.text('sent_at IS NULL AND dead_at IS NULL'))
    op.create_table('pipeline_lock',
    sa.Column('name', sa.Text(), nullable=False),
    sa.Column('holder', sa.Text(), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('proc_state',
    sa.Column('msg_id', sa.BigInteger(), autoincrement=False, nullable=False),
    sa.Column('status', sa.Text(), nullable=False),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('error_class', sa.Text(), nullable=True),
    sa.Column('error_detail', sa.Text(), nullable=True),
    sa.Column('attempts', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('next_attempt_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('applied_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('terminal_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('identity_key', sa.Text(), nullable=True),
    sa.Column('payload_hash', sa.Text(), nullable=True),
    sa.Column('dup_of', sa.BigInteger(), nullable=True),
    sa.Column('msg_type', sa.Text(), nullable=True),
    sa.Column('msg_styp', sa.Text(), nullable=True),
    sa.Column('late_arrival', sa.Boolean(), server_default=sa.text('false'), nullable=False),
    sa.PrimaryKeyConstraint('msg_id'),
    sa.UniqueConstraint('identity_key', name='proc_state_identity_key_key')
    )
    op.create_index('proc_state_open_idx', 'proc_state', ['msg_id'], unique=False, postgresql_where=sa.text("status IN ('PENDING','FAILED')"))
    op.create_table('proc_state_hst',
    sa.Column('id', sa.BigInteger(), autoincrement=True, nullable=False),
    sa.Column('msg_id', sa.BigInteger(), nullable=False),
    sa.Column('status', sa.Text(), nullable=False),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('error_class', sa.Text(), nullable=True),
    sa.Column('error_detail', sa.Text(), nullable=True),
    sa.Column('attempt', sa.Integer(), nullable=True),
    sa.Column('at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('proc_state_hst_msg_idx', 'proc_state_hst', ['msg_id'], unique=False)
    op.create_table('ref_master',
    sa.Column('rtype', sa.Text(), nullable=False),
    sa.Column('rkey', sa.Text(), nullable=False),
    sa.Column('fields', sa.Text(), nullable=False),
    sa.Column('source', sa.Text(), nullable=True),
    sa.Column('batch_id', sa.BigInteger(), nullable=True),
    sa.Column('refreshed_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.PrimaryKeyConstraint('rtype', 'rkey', name='ref_master_pkey')
    )
    op.create_table('req_track',
    sa.Column('req_id', sa.BigInteger(), autoincrement=True, nullable=False),
    sa.Column('rtype', sa.Text(), nullable=False),
    sa.Column('styp', sa.Text(), nullable=False),
    sa.Column('fday', sa.Date(), nullable=True),
    sa.Column('start_text', sa.Text(), nullable=True),
    sa.Column('end_text', sa.Text(), nullable=True),
    sa.Column('status', sa.Text(), nullable=False),
    sa.Column('coutmsgs_id', sa.BigInteger(), nullable=True),
    sa.Column('answer_msg_id', sa.BigInteger(), nullable=True),
    sa.Column('detail', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('sent_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('done_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('req_id')
    )
    op.create_table('schd_gen',
    sa.Column('fday', sa.Date(), nullable=False),
    sa.Column('version', sa.BigInteger(), nullable=False),
    sa.Column('last_message_id', sa.BigInteger(), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.PrimaryKeyConstraint('fday')
    )
    op.create_table('schd_gen_flid',
    sa.Column('fday', sa.Date(), nullable=False),
    sa.Column('flid', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('fday', 'flid', name='schd_gen_flid_pkey')
    )


    op.execute("INSERT INTO pipeline_lock (name) VALUES ('FLIGHT_SCHD_WRITER')")
    op.execute("INSERT INTO intake_state (name, low_water) VALUES ('cminmsgs', 0)")


def downgrade() -> None:
    op.drop_table('schd_gen_flid')
    op.drop_table('schd_gen')
    op.drop_table('req_track')
    op.drop_table('ref_master')
    op.drop_index('proc_state_hst_msg_idx', table_name='proc_state_hst')
    op.drop_table('proc_state_hst')
    op.drop_index('proc_state_open_idx', table_name='proc_state', postgresql_where=sa.text("status IN ('PENDING','FAILED')"))
    op.drop_table('proc_state')
    op.drop_table('pipeline_lock')
    op.drop_index('msg_event_unsent_idx', table_name='msg_event', postgresql_where=sa.text('sent_at IS NULL AND dead_at IS NULL'))
    op.drop_index('msg_event_msg_idx', table_name='msg_event')
    op.drop_table('msg_event')
    op.drop_table('intake_state')
    op.drop_table('intake_gap')
    op.drop_table('flight_stand_plan')
    op.drop_table('flight_schd')
    op.drop_table('flight_route_point')
    op.drop_table('flight_gate')
    op.drop_table('flight_delay')
    op.drop_table('flight_chute')
    op.drop_table('flight_chock_op')
    op.drop_table('flight_checkin')
    op.drop_table('flight_bridge_op')
    op.drop_table('flight_belt')
    op.drop_index('backfill_todo_pending_idx', table_name='backfill_todo', postgresql_where=sa.text("status = 'PENDING'"))
    op.drop_table('backfill_todo')
