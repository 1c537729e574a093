"""Whether the cloud gave an attempt's instance a final notice.

``job_attempts.notice_final`` (boolean, false by default): the instance's agent
reported the cloud's final notice (or the interruption itself), as opposed to an
advance notice alone or the control plane's own stop request. With
``end_reason = preempted`` it is the one rule for an interrupted attempt
(:func:`spothop.jobs.lifecycle.interrupted`), which the controller
(``max_interruptions``) and every surface read.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "job_attempts",
        sa.Column("notice_final", sa.Boolean, nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    with op.batch_alter_table("job_attempts") as batch:
        batch.drop_column("notice_final")
