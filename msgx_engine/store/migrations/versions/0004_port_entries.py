"""PORT keeps its open (POID=O) and close (POID=C) times side by side: ``port_text`` (a JSON
array of {POID, POTM}) replaces the single ``port_potm``/``port_poid`` pair, which let a close
message erase the open time. Existing values move over.

Revision ID: 0004
Revises: 0003
"""
import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("flight_schd", sa.Column("port_text", sa.Text(), nullable=True))
    op.execute("""
        UPDATE flight_schd SET port_text = json_build_array(json_strip_nulls(
            json_build_object('POID', port_poid, 'POTM', port_potm)))::text
        WHERE port_poid IS NOT NULL OR port_potm IS NOT NULL""")
    op.drop_column("flight_schd", "port_potm")
    op.drop_column("flight_schd", "port_poid")


def downgrade() -> None:
    op.add_column("flight_schd", sa.Column("port_poid", sa.Text(), nullable=True))
    op.add_column("flight_schd", sa.Column("port_potm", sa.Text(), nullable=True))
    # The single pair keeps the close time when both exist (the old last-message-wins outcome).
    op.execute("""
        UPDATE flight_schd f SET port_poid = e->>'POID', port_potm = e->>'POTM'
        FROM (SELECT flid, (SELECT x FROM json_array_elements(port_text::json) x
                            ORDER BY (x->>'POID') = 'C' DESC LIMIT 1) AS e
              FROM flight_schd WHERE port_text IS NOT NULL) s
        WHERE f.flid = s.flid""")
    op.drop_column("flight_schd", "port_text")
