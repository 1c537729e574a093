"""The job store's tables: jobs, their nodes, attempts and events, market cooldowns, the controller's cursor.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_ID = 128
_NAME = 200
_PLACE = 128


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("job_id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(_NAME), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("spec_json", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("created_unix_s", sa.Float, nullable=False),
        sa.Column("updated_unix_s", sa.Float, nullable=False),
        sa.Column("interruptions", sa.Integer, nullable=False),
        sa.Column("retries_used", sa.Integer, nullable=False),
        sa.Column("on_demand_forced", sa.Boolean, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("lease_owner", sa.String(_ID), nullable=True),
        sa.Column("lease_token", sa.Integer, nullable=False),
        sa.Column("lease_expires_unix_s", sa.Float, nullable=True),
    )
    op.create_index("ix_jobs_state_created_unix_s", "jobs", ["state", "created_unix_s"])
    op.create_table(
        "job_nodes",
        sa.Column("job_id", sa.String(32), primary_key=True),
        sa.Column("node", sa.Integer, primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("updated_unix_s", sa.Float, nullable=False),
    )
    op.create_table(
        "job_attempts",
        sa.Column("attempt_id", sa.String(32), primary_key=True),
        sa.Column("job_id", sa.String(32), nullable=False),
        sa.Column("node", sa.Integer, nullable=False),
        sa.Column("launch_token", sa.String(_ID), nullable=False),
        sa.Column("provider", sa.String(_PLACE), nullable=False),
        sa.Column("region", sa.String(_PLACE), nullable=False),
        sa.Column("zone", sa.String(_PLACE), nullable=False),
        sa.Column("instance_type", sa.String(_PLACE), nullable=False),
        sa.Column("market_kind", sa.String(16), nullable=False),
        sa.Column("price_usd_per_hour", sa.Float, nullable=False),
        sa.Column("instance_id", sa.String(_ID), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("launched_unix_s", sa.Float, nullable=False),
        sa.Column("running_unix_s", sa.Float, nullable=True),
        sa.Column("noticed_unix_s", sa.Float, nullable=True),
        sa.Column("ended_unix_s", sa.Float, nullable=True),
        sa.Column("end_reason", sa.String(32), nullable=True),
        sa.Column("error_code", sa.String(_NAME), nullable=True),
        sa.Column("error_message", sa.Text, nullable=True),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.UniqueConstraint("launch_token", name="uq_job_attempts_launch_token"),
    )
    op.create_index(
        "ix_job_attempts_job_id_launched_unix_s", "job_attempts", ["job_id", "launched_unix_s"]
    )
    op.create_index("ix_job_attempts_instance_id", "job_attempts", ["instance_id"])
    op.create_table(
        "job_events",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(32), nullable=False),
        sa.Column("time_unix_s", sa.Float, nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("data", sa.Text, nullable=False),
    )
    op.create_index("ix_job_events_job_id_seq", "job_events", ["job_id", "seq"])
    op.create_table(
        "market_cooldowns",
        sa.Column("provider", sa.String(_PLACE), primary_key=True),
        sa.Column("region", sa.String(_PLACE), primary_key=True),
        sa.Column("zone", sa.String(_PLACE), primary_key=True),
        sa.Column("instance_type", sa.String(_PLACE), primary_key=True),
        sa.Column("until_unix_s", sa.Float, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("created_unix_s", sa.Float, nullable=False),
    )
    op.create_table(
        "controller_cursor",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("position", sa.Text, nullable=False),
        sa.Column("updated_unix_s", sa.Float, nullable=False),
    )
