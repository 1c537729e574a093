"""A job's file mounts: ``jobs.mounts_json``.

The job's ``file_mounts`` as ``spothop launch`` planned them
(:mod:`spothop.controlplane.mounts`): for each destination, the packed
upload's sha256, or the bucket URL or bucket path the agent copies from. The
agent API serves an instance its job's mount archives by this column, beside
``code_sha256``. Null for a job without mounts, and for the jobs stored before.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("mounts_json", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("mounts_json")
