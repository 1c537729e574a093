"""Baseline: the five tables of spothop 0.1.0 (price history, interruptions, runs, the shard queue).

A store made by 0.1.0 has some or all of these tables and no revision (one only
ever used for prices has just the market tables). This revision creates each
table that is missing and leaves those present as they are, so such a store is
taken as the baseline and filled in, never recreated: its rows stay.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_NAME = 128
_QUEUE_NAME = 200


def _missing(name: str) -> bool:
    return not sa.inspect(op.get_bind()).has_table(name)


def upgrade() -> None:
    _create_market_tables()
    _create_queue_tables()


def _create_market_tables() -> None:
    """Price history, interruptions and exposure (runs), each only if missing."""
    if _missing("market_prices"):
        op.create_table(
            "market_prices",
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("provider", sa.String(32), nullable=False),
            sa.Column("region", sa.String(_NAME), nullable=False),
            sa.Column("zone", sa.String(_NAME), nullable=False),
            sa.Column("instance_type", sa.String(_NAME), nullable=False),
            sa.Column("market", sa.String(16), nullable=False),
            sa.Column("product", sa.String(_NAME), nullable=False),
            sa.Column("time_unix_ms", sa.BigInteger, nullable=False),
            sa.Column("price_usd_per_hour", sa.Float, nullable=False),
            sa.Column("gpu", sa.String(64), nullable=True),
            sa.Column("gpu_count", sa.Integer, nullable=True),
            sa.Column("usd_per_gpu_second", sa.Float, nullable=True),
            sa.Column("source", sa.String(512), nullable=False),
            sa.UniqueConstraint(
                "provider",
                "region",
                "zone",
                "instance_type",
                "market",
                "product",
                "time_unix_ms",
                name="uq_market_prices_point",
            ),
        )
        op.create_index("ix_market_prices_time", "market_prices", ["time_unix_ms"])
    if _missing("market_interruptions"):
        op.create_table(
            "market_interruptions",
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("cloud", sa.String(32), nullable=False),
            sa.Column("region", sa.String(_NAME), nullable=False),
            sa.Column("zone", sa.String(_NAME), nullable=False),
            sa.Column("instance_type", sa.String(_NAME), nullable=False),
            sa.Column("notice_kind", sa.String(64), nullable=False),
            sa.Column("lead_time_s", sa.Float, nullable=True),
            sa.Column("time_unix_s", sa.Float, nullable=False),
            sa.Column("cause", sa.String(256), nullable=False),
            sa.Column("instance_id", sa.String(_NAME), nullable=False),
        )
        op.create_index("ix_market_interruptions_time", "market_interruptions", ["time_unix_s"])
    if _missing("market_exposure"):
        op.create_table(
            "market_exposure",
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("cloud", sa.String(32), nullable=False),
            sa.Column("region", sa.String(_NAME), nullable=False),
            sa.Column("zone", sa.String(_NAME), nullable=False),
            sa.Column("instance_type", sa.String(_NAME), nullable=False),
            sa.Column("instance_id", sa.String(_NAME), nullable=False),
            sa.Column("start_unix_s", sa.Float, nullable=False),
            sa.Column("end_unix_s", sa.Float, nullable=False),
        )


def _create_queue_tables() -> None:
    """The shard queue's jobs and shards, each only if missing."""
    if _missing("queue_jobs"):
        op.create_table(
            "queue_jobs",
            sa.Column("job", sa.String(_QUEUE_NAME), primary_key=True),
            sa.Column("max_attempts", sa.Integer, nullable=False),
            sa.Column("backoff_base_s", sa.Float, nullable=False),
            sa.Column("backoff_max_s", sa.Float, nullable=False),
            sa.Column("created_at", sa.Float, nullable=False),
        )
    if _missing("queue_shards"):
        op.create_table(
            "queue_shards",
            sa.Column("job", sa.String(_QUEUE_NAME), primary_key=True),
            sa.Column("shard_id", sa.String(_QUEUE_NAME), primary_key=True),
            sa.Column("seq", sa.Integer, nullable=False),
            sa.Column("payload", sa.Text, nullable=False),
            sa.Column("state", sa.String(8), nullable=False),
            sa.Column("token", sa.Integer, nullable=False),
            sa.Column("attempts", sa.Integer, nullable=False),
            sa.Column("failures", sa.Integer, nullable=False),
            sa.Column("releases", sa.Integer, nullable=False),
            sa.Column("reclaims", sa.Integer, nullable=False),
            sa.Column("worker", sa.String(_QUEUE_NAME)),
            sa.Column("available_at", sa.Float),
            sa.Column("lease_s", sa.Float),
            sa.Column("output_ref", sa.Text),
            sa.Column("last_error", sa.Text),
        )
        op.create_index("queue_shards_claimable", "queue_shards", ["job", "state", "available_at"])
