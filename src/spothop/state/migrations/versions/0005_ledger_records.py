"""The cost ledger: one billing record per instance attempt.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_ID = 128
_PLACE = 128


def upgrade() -> None:
    op.create_table(
        "ledger_records",
        sa.Column("attempt_id", sa.String(32), primary_key=True),
        sa.Column("job_id", sa.String(32), nullable=False),
        sa.Column("node", sa.Integer, nullable=False),
        sa.Column("provider", sa.String(_PLACE), nullable=False),
        sa.Column("region", sa.String(_PLACE), nullable=False),
        sa.Column("zone", sa.String(_PLACE), nullable=False),
        sa.Column("instance_type", sa.String(_PLACE), nullable=False),
        sa.Column("market_kind", sa.String(16), nullable=False),
        sa.Column("instance_id", sa.String(_ID), nullable=True),
        sa.Column("currency", sa.String(8), nullable=False),
        sa.Column("price_usd_per_hour", sa.Float, nullable=True),
        sa.Column("rate_source", sa.String(32), nullable=False),
        sa.Column("clock", sa.String(16), nullable=False),
        sa.Column("usage_start_unix_s", sa.Float, nullable=True),
        sa.Column("usage_end_unix_s", sa.Float, nullable=True),
        sa.Column("usage_s", sa.Float, nullable=False),
        sa.Column("billed_s", sa.Float, nullable=False),
        sa.Column("cost_microusd", sa.Integer, nullable=True),
        sa.Column("provider_cost_microusd", sa.Integer, nullable=True),
        sa.Column("rule_json", sa.Text, nullable=False),
        sa.Column("tags_json", sa.Text, nullable=False),
        sa.Column("closed", sa.Boolean, nullable=False),
        sa.Column("updated_unix_s", sa.Float, nullable=False),
    )
    op.create_index("ix_ledger_records_job_id", "ledger_records", ["job_id"])
    op.create_index(
        "ix_ledger_records_provider_usage_start_unix_s",
        "ledger_records",
        ["provider", "usage_start_unix_s"],
    )


def downgrade() -> None:
    op.drop_table("ledger_records")
