"""Market interruptions and instance runs name the provider ``provider``, as every other table does.

``market_interruptions.cloud`` and ``market_exposure.cloud`` become ``provider``
(``ALTER TABLE … RENAME COLUMN``, SQLite 3.25+ and PostgreSQL alike): the column
keeps its rows, type and constraints.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("market_interruptions", "market_exposure"):
        op.alter_column(table, "cloud", new_column_name="provider")
