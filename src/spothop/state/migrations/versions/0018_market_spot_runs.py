"""Each spot market's availability runs as a controller saw them: ``market_spot_runs``.

One row per run: the market (provider, region, zone, instance type), when the
run began on the controller's clock, and whether spot was up in it. A deadline
policy plans on how long spot has been up or down; with the runs in the store
a controller that restarts goes on with the episode it was in instead of
reading every market as one tick old (``jobs/controller/spot_runs.py``).

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "market_spot_runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("provider", sa.String(32), nullable=False),
        sa.Column("region", sa.String(128), nullable=False),
        sa.Column("zone", sa.String(128), nullable=False),
        sa.Column("instance_type", sa.String(128), nullable=False),
        sa.Column("start_unix_s", sa.Float, nullable=False),
        sa.Column("up", sa.Boolean, nullable=False),
        sa.UniqueConstraint(
            "provider",
            "region",
            "zone",
            "instance_type",
            "start_unix_s",
            name="uq_market_spot_runs_start",
        ),
    )


def downgrade() -> None:
    op.drop_table("market_spot_runs")
