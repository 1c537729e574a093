"""A job's secrets, sealed: ``job_secrets`` (job_id, name, sealed).

The name is kept in clear (``status`` and the agent's request name it); the
value only as a Fernet token sealed with the key in the controller's home
(:mod:`spothop.state.sealed`). Delivered to the job's agents through the
control plane, never in a boot script or the launch's environment.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_secrets",
        sa.Column("job_id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("sealed", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("job_secrets")
