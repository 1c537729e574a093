"""A grouped task's attempts carry their group generation and the generation's node count.

``job_attempts.generation`` (integer, default 0): the group generation the
attempt was launched in (0, 1, 2… bumped at each relaunch or re-form of a
multi-node task); ``job_attempts.group_nnodes`` (nullable integer): how many
nodes that generation has (NULL for a single-node job). docs/multinode.md.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "job_attempts",
        sa.Column("generation", sa.Integer, nullable=False, server_default="0"),
    )
    op.add_column("job_attempts", sa.Column("group_nnodes", sa.Integer, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job_attempts") as batch:
        batch.drop_column("group_nnodes")
        batch.drop_column("generation")
