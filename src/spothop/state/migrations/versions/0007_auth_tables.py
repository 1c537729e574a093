"""The server's callers: projects, users and their API tokens (agent tokens too), hashed.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_ID = 128
_NAME = 64
_TOKEN_ID = 16
_HASH = 256


def upgrade() -> None:
    op.create_table(
        "projects",
        sa.Column("name", sa.String(_NAME), primary_key=True),
        sa.Column("created_unix_s", sa.Float, nullable=False),
    )
    op.create_table(
        "users",
        sa.Column("user_id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(_NAME), nullable=False),
        sa.Column(
            "project",
            sa.String(_NAME),
            sa.ForeignKey("projects.name", name="fk_users_project_projects"),
            nullable=False,
        ),
        sa.Column("created_unix_s", sa.Float, nullable=False),
        sa.UniqueConstraint("name", name="uq_users_name"),
    )
    op.create_table(
        "api_tokens",
        sa.Column("token_id", sa.String(_TOKEN_ID), primary_key=True),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("secret_hash", sa.String(_HASH), nullable=False),
        sa.Column("user_id", sa.String(32), nullable=True),
        sa.Column("project", sa.String(_NAME), nullable=True),
        sa.Column("job_id", sa.String(_ID), nullable=True),
        sa.Column("instance_id", sa.String(_ID), nullable=True),
        sa.Column("label", sa.String(_NAME), nullable=False),
        sa.Column("created_unix_s", sa.Float, nullable=False),
        sa.Column("revoked_unix_s", sa.Float, nullable=True),
    )
    op.create_index("ix_api_tokens_job_id_instance_id", "api_tokens", ["job_id", "instance_id"])
    op.create_index("ix_api_tokens_user_id", "api_tokens", ["user_id"])


def downgrade() -> None:
    op.drop_table("api_tokens")
    op.drop_table("users")
    op.drop_table("projects")
