"""The worker's output in the store: ``job_log_chunks``, what the agents ship.

The agent ships its worker's output in ordered chunks (``POST
/v1/agents/{id}/logs``); ``spothop logs`` reads them here, so nothing on an
instance writes into the controller's folders. Keyed ``(job_id, attempt_id,
offset_bytes)``: an attempt's chunks in order, its tail and what came after an
offset are each one range of the key (docs/state.md).

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_log_chunks",
        sa.Column("job_id", sa.String(128), primary_key=True),
        sa.Column("attempt_id", sa.String(128), primary_key=True),
        sa.Column("offset_bytes", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("length_bytes", sa.Integer, nullable=False),
        sa.Column("node", sa.Integer, nullable=False),
        sa.Column("instance_id", sa.String(128), nullable=False),
        sa.Column("received_unix_s", sa.Float, nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("job_log_chunks")
