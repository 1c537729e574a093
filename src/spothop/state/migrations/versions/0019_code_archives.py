"""Uploaded code in the store: ``code_archives``, ``code_archive_chunks``, ``code_archive_projects``.

An archive uploaded to one replica of the server was kept only in that
replica's home, so a job run (or taken over) by another replica had no code to
serve its agents. The archives now live in the store every replica shares, in
chunks of a few MiB, with the projects that uploaded them; a replica's home keeps
a copy as a cache (``state/code_archives.py``).

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "code_archives",
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("size_bytes", sa.BigInteger, nullable=False),
        sa.Column("chunks", sa.Integer, nullable=False),
        sa.Column("stored_unix_s", sa.Float, nullable=False),
    )
    op.create_table(
        "code_archive_chunks",
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
    )
    op.create_table(
        "code_archive_projects",
        sa.Column("project", sa.String(128), primary_key=True),
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("uploaded_unix_s", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("code_archive_projects")
    op.drop_table("code_archive_chunks")
    op.drop_table("code_archives")
