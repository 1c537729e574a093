"""The shard queue's tables (:mod:`spothop.queue.sql_backend` works on them).

- ``queue_jobs``: one row per job (queue): its retry policy.
- ``queue_shards``: one row per shard, with its lease: ``token`` is the
  fencing token (bumped at each claim), ``available_at`` is when a pending
  shard may be claimed (after backoff) or when a lease expires, NULL once the
  shard is done or dead. One column for both makes "claimable" one range scan
  of ``queue_shards_claimable``.
"""

from __future__ import annotations

from sqlalchemy import Column, Float, Index, Integer, String, Table, Text

from spothop.state.registry import metadata

_NAME = 200  # job names, shard ids and worker ids

jobs_table = Table(
    "queue_jobs",
    metadata,
    Column("job", String(_NAME), primary_key=True),
    Column("max_attempts", Integer, nullable=False),
    Column("backoff_base_s", Float, nullable=False),
    Column("backoff_max_s", Float, nullable=False),
    Column("created_at", Float, nullable=False),
)

shards_table = Table(
    "queue_shards",
    metadata,
    Column("job", String(_NAME), primary_key=True),
    Column("shard_id", String(_NAME), primary_key=True),
    Column("seq", Integer, nullable=False),
    Column("payload", Text, nullable=False),
    Column("state", String(8), nullable=False),
    Column("token", Integer, nullable=False, default=0),
    Column("attempts", Integer, nullable=False, default=0),
    Column("failures", Integer, nullable=False, default=0),
    Column("releases", Integer, nullable=False, default=0),
    Column("reclaims", Integer, nullable=False, default=0),
    Column("worker", String(_NAME)),
    Column("available_at", Float),
    Column("lease_s", Float),
    Column("output_ref", Text),
    Column("last_error", Text),
    Index("queue_shards_claimable", "job", "state", "available_at"),
)
