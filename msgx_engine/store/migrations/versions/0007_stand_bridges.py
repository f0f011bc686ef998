"""Stand -> airbridge (US-14, US-05 AC6, D27): the derived airbridges stored with each flight, and
which reference categories have been loaded whole.

- ``ref_load``: one row per reference type that a full package (DNLD/RESP) has replaced, with the
  mailbox id and time of the last one. The airbridge mapping counts as known only once ABDG has
  been loaded whole; before that every stand is published with ``ABDG: null`` (US-14 AC3).
  Categories already present in ``ref_master`` are taken as loaded (their last batch).
- ``flight_schd.stand_bridges``: JSON object stand -> sorted airbridge codes for every stand the
  flight names (PSDT PSST, STND); NULL when it names none or the mapping is unknown. Filled here
  for existing flights from the current ABDG rows (codes sorted in code-point order, as Python
  sorts them), without a version bump: run the projection rebuild after upgrading.

Revision ID: 0007
Revises: 0006
"""
import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ref_load",
        sa.Column("rtype", sa.Text(), primary_key=True),
        sa.Column("msg_id", sa.BigInteger()),
        sa.Column("loaded_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    op.add_column("flight_schd", sa.Column("stand_bridges", sa.Text(), nullable=True))
    op.execute("INSERT INTO ref_load (rtype, msg_id, loaded_at) SELECT rtype, max(batch_id), max(refreshed_at) "
               "FROM ref_master GROUP BY rtype")
    op.execute("""
        WITH served AS (
            SELECT stand, jsonb_agg(code ORDER BY code COLLATE "C") AS codes
            FROM (SELECT DISTINCT s.stand, r.rkey AS code
                  FROM ref_master r, jsonb_array_elements_text(r.fields::jsonb -> 'STND') AS s(stand)
                  WHERE r.rtype = 'ABDG' AND s.stand <> '') d
            GROUP BY stand),
        named AS (
            SELECT flid, stnd AS stand FROM flight_schd WHERE stnd IS NOT NULL
            UNION SELECT flid, psst FROM flight_stand_plan WHERE psst IS NOT NULL),
        per_flight AS (
            SELECT n.flid, jsonb_object_agg(n.stand, COALESCE(v.codes, '[]'::jsonb)) AS bridges
            FROM named n LEFT JOIN served v USING (stand) GROUP BY n.flid)
        UPDATE flight_schd f SET stand_bridges = p.bridges::text FROM per_flight p
        WHERE f.flid = p.flid AND EXISTS (SELECT 1 FROM ref_load WHERE rtype = 'ABDG')
    """)


def downgrade() -> None:
    op.drop_column("flight_schd", "stand_bridges")
    op.drop_table("ref_load")
