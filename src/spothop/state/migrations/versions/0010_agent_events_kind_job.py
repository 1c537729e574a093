"""The agents' events indexed by kind, then job: one index for a job's report and the metrics.

A job's report reads only a few kinds of its agents' events (interruptions,
final notices) among the thousands its agents send (probes and the rest), and
``/metrics`` reads the notices and saves of every job (``kind IN (...)``
alone). ``ix_agent_events_kind_job_id`` on ``agent_events (kind, job_id)``
serves both, the metrics by its first column and the report by both, so
neither reads the rows of the other kinds
(:meth:`spothop.observe.events.EventStream.read` given ``kinds``).

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_agent_events_kind_job_id", "agent_events", ["kind", "job_id"])


def downgrade() -> None:
    op.drop_index("ix_agent_events_kind_job_id", table_name="agent_events")
