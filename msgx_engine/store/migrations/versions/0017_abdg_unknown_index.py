"""An index of the live flights whose airbridges are unknown, for the reference-data health figure.

``mapping_status`` (the health figures, every ``/metrics`` scrape and health tick, and the Dagster
check on the reference data) counts the live flights that name a stand but store no airbridges
(``stand_bridges`` NULL, published as ``ABDG: null``, US-14 AC3). Without an index that count read
every row of ``flight_schd``: 0.3 s at 400,000 stored flights (a year at an airport), on every
scrape. Once the ABDG category is loaded every flight naming a stand stores its airbridges, so the
rows this index keeps are the flights with no stand yet (days ahead of operation) and the few, if
any, that are really unknown: the count reads those instead of the table.

Revision ID: 0017
Revises: 0016
"""
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE INDEX flight_schd_bridges_unknown_idx ON flight_schd (flid) "
               "WHERE stand_bridges IS NULL AND NOT deleted")


def downgrade() -> None:
    op.execute("DROP INDEX flight_schd_bridges_unknown_idx")
