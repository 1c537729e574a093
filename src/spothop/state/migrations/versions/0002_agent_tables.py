"""The agents' tables: heartbeats, typed events, and what the control plane asks of an instance.

spothop 0.1.0's agent could keep heartbeats in a table ``agent_heartbeats`` of
any SQLite file (``--heartbeat-sqlite``), with fewer columns and no
constraints. Where that table is in the store, its rows move into the new one
(job and provider unknown: ``''``).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_ID = 128
_OLD_HEARTBEATS = "agent_heartbeats_0_1"  # the 0.1.0 agent's table while its rows move


def upgrade() -> None:
    had_heartbeats = sa.inspect(op.get_bind()).has_table("agent_heartbeats")
    if had_heartbeats:
        op.rename_table("agent_heartbeats", _OLD_HEARTBEATS)
    op.create_table(
        "agent_heartbeats",
        sa.Column("instance_id", sa.String(_ID), primary_key=True),
        sa.Column("worker_id", sa.String(_ID), nullable=False),
        sa.Column("job_id", sa.String(_ID), nullable=False),
        sa.Column("provider", sa.String(32), nullable=False),
        sa.Column("time_unix_s", sa.Float, nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("worker_pid", sa.Integer, nullable=True),
        sa.Column("worker_restarts", sa.Integer, nullable=False),
        sa.Column("worker_heartbeat_unix_s", sa.Float, nullable=True),
        sa.Column("notice_blind", sa.Boolean, nullable=False),
    )
    if had_heartbeats:
        op.execute(
            "INSERT INTO agent_heartbeats (instance_id, worker_id, job_id, provider, time_unix_s, state,"
            " worker_pid, worker_restarts, worker_heartbeat_unix_s, notice_blind)"
            " SELECT instance_id, COALESCE(worker_id, ''), '', '', COALESCE(time_unix_s, 0),"
            " COALESCE(state, ''), worker_pid, COALESCE(worker_restarts, 0), worker_heartbeat_unix_s,"
            f" COALESCE(notice_blind, 0) <> 0 FROM {_OLD_HEARTBEATS} WHERE instance_id IS NOT NULL"
        )
        op.drop_table(_OLD_HEARTBEATS)
    op.create_table(
        "agent_events",
        sa.Column("event_id", sa.String(64), primary_key=True),
        sa.Column("schema_version", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("instance_id", sa.String(_ID), nullable=False),
        sa.Column("job_id", sa.String(_ID), nullable=False),
        sa.Column("provider", sa.String(32), nullable=False),
        sa.Column("region", sa.String(_ID), nullable=False),
        sa.Column("zone", sa.String(_ID), nullable=False),
        sa.Column("instance_type", sa.String(_ID), nullable=False),
        sa.Column("time_unix_s", sa.Float, nullable=False),
        sa.Column("received_unix_s", sa.Float, nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
    )
    op.create_index(
        "ix_agent_events_instance_id_time_unix_s", "agent_events", ["instance_id", "time_unix_s"]
    )
    op.create_index("ix_agent_events_job_id_time_unix_s", "agent_events", ["job_id", "time_unix_s"])
    op.create_table(
        "agent_requests",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("instance_id", sa.String(_ID), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(256), nullable=False),
        sa.Column("created_unix_s", sa.Float, nullable=False),
        sa.Column("deadline_unix_s", sa.Float, nullable=True),
        sa.Column("acknowledged_unix_s", sa.Float, nullable=True),
    )
    op.create_index(
        "ix_agent_requests_instance_id_acknowledged_unix_s",
        "agent_requests",
        ["instance_id", "acknowledged_unix_s"],
    )
