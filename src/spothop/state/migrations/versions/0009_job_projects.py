"""Which project (and user) owns a job launched through the server.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_NAME = 64


def upgrade() -> None:
    op.create_table(
        "job_projects",
        sa.Column("job_id", sa.String(32), primary_key=True),
        sa.Column("project", sa.String(_NAME), nullable=False),
        sa.Column("user_id", sa.String(32), nullable=True),
    )
    op.create_index("ix_job_projects_project", "job_projects", ["project"])


def downgrade() -> None:
    op.drop_table("job_projects")
