"""A job's packed workdir: ``jobs.code_sha256``.

The sha256 of the archive ``spothop launch`` packed from the job's ``workdir``
(:mod:`spothop.controlplane.archives`). The agent API serves an instance only
its own job's archive (``GET /v1/agents/{instance_id}/code/{sha256}``), by
this column. Null for a job without a workdir, and for the jobs stored before.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("code_sha256", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("code_sha256")
