"""What a grouped task's rendezvous needs: each agent's private address, each attempt's processes per node.

``agent_heartbeats.private_address`` (string, empty when unknown): the
instance's address on its cloud's private network, as its metadata service
gives it, written by the agent's registration (a heartbeat leaves it as it is).
A group's nodes meet at node 0's (docs/multinode.md).

``job_attempts.group_nproc_per_node`` (nullable integer): a grouped task's
processes per node in the attempt's generation (its instance type's GPUs), which
the rendezvous hands every node with the addresses.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "agent_heartbeats",
        sa.Column("private_address", sa.String(64), nullable=False, server_default=""),
    )
    op.add_column("job_attempts", sa.Column("group_nproc_per_node", sa.Integer, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("agent_heartbeats") as batch:
        batch.drop_column("private_address")
    with op.batch_alter_table("job_attempts") as batch:
        batch.drop_column("group_nproc_per_node")
