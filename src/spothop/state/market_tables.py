"""The market layer's tables (SQLAlchemy Core), on spothop's one :data:`~spothop.state.metadata`.

Four tables, created and upgraded by the migrations of :mod:`spothop.state`
(the market's stores call :func:`~spothop.state.ensure_schema` when they open one). They are
defined here, in the state layer, like every other table spothop owns: the market layer sits
above ``state/`` and reads and writes them through its stores.

- ``market_prices``: one row per price point of one series — (provider, region,
  zone, instance type, spot or on-demand, product) at one instant. The unique
  key on the series plus ``time_unix_ms`` is what makes imports idempotent.
- ``market_interruptions``: spothop's own record of each preemption (what the
  agent saw: notice kind, lead time, cause).
- ``market_exposure``: instance runs (start, end) per market, the denominator of
  "preemptions per instance-hour".
- ``market_spot_runs``: each spot market's availability runs as a controller saw
  them pass after pass (the start of each run and whether spot was up), so a
  controller that restarts knows how long spot has been up or down
  (``jobs/controller/spot_runs.py``); the unique key makes a write repeatable.

``zone`` is ``''`` where a cloud prices or reports a whole region alike
(SQL unique keys treat NULLs as distinct, so the empty string keeps them unique).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    String,
    Table,
    UniqueConstraint,
)

from spothop.state.registry import metadata

_NAME = 128  # cloud names for regions, zones and types are far shorter than this


def _market_columns() -> tuple[Column[str], ...]:
    """A market's identity, as every market table stores it (fresh columns: one table each)."""
    return (
        Column("provider", String(32), nullable=False),
        Column("region", String(_NAME), nullable=False),
        Column("zone", String(_NAME), nullable=False, default=""),
        Column("instance_type", String(_NAME), nullable=False),
    )


prices = Table(
    "market_prices",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    *_market_columns(),
    Column("market", String(16), nullable=False),  # "spot" | "on-demand"
    Column("product", String(_NAME), nullable=False, default=""),
    Column("time_unix_ms", BigInteger, nullable=False),
    Column("price_usd_per_hour", Float, nullable=False),
    Column("gpu", String(64), nullable=True),  # canonical GPU name; NULL: not in the catalog
    Column("gpu_count", Integer, nullable=True),  # NULL: the catalog does not know the type
    Column("usd_per_gpu_second", Float, nullable=True),
    Column("source", String(512), nullable=False, default=""),
    UniqueConstraint(
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
Index("ix_market_prices_time", prices.c.time_unix_ms)

interruptions = Table(
    "market_interruptions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    *_market_columns(),
    Column("notice_kind", String(64), nullable=False),
    Column("lead_time_s", Float, nullable=True),  # None: taken with no notice
    Column("time_unix_s", Float, nullable=False),
    Column("cause", String(256), nullable=False, default=""),
    Column("instance_id", String(_NAME), nullable=False, default=""),
)
Index("ix_market_interruptions_time", interruptions.c.time_unix_s)

exposure = Table(
    "market_exposure",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    *_market_columns(),
    Column("instance_id", String(_NAME), nullable=False, default=""),
    Column("start_unix_s", Float, nullable=False),
    Column("end_unix_s", Float, nullable=False),
)

spot_runs = Table(
    "market_spot_runs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    *_market_columns(),
    Column("start_unix_s", Float, nullable=False),  # on the controller's clock
    Column("up", Boolean, nullable=False),
    UniqueConstraint(
        "provider",
        "region",
        "zone",
        "instance_type",
        "start_unix_s",
        name="uq_market_spot_runs_start",
    ),
)
