"""The launch an agent token was issued for.

``api_tokens.launch_token`` (nullable): the launch token of the attempt whose
instance holds the agent token. The token names that launch token as its
instance until it is bound to the instance, by the controller once the cloud's
launch call returns, or by the instance itself on its token's first use
(docs/server.md, "Security": agent tokens). The column keeps the launch after the bind, so
the controller can check the instance the token was bound to against the one
the cloud launched.

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("api_tokens", sa.Column("launch_token", sa.String(128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("launch_token")
