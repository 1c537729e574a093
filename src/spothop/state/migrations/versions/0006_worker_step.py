"""The training step a worker last reported, carried by its agent's heartbeat.

``agent_heartbeats.worker_step`` (nullable integer): the step of the worker's
newest ``sdk.heartbeat(step=...)`` or ``sdk.saved(step=...)``; NULL when the
worker reports none (batch workers, plain scripts). ``spothop status`` shows it
as a task job's progress.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("agent_heartbeats", sa.Column("worker_step", sa.Integer, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("agent_heartbeats") as batch:
        batch.drop_column("worker_step")
