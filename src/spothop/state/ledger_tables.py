"""The cost ledger's table (:mod:`spothop.observe.ledger` works on it).

- ``ledger_records``: one billing record per instance attempt
  (``job_attempts.attempt_id``): where it ran (provider, zone, instance type,
  market), the price in force (``price_usd_per_hour`` with its ``currency``
  and ``rate_source``; NULL: no price known, never 0), the running time and
  the seconds billed under the provider's rule (``rule_json``), the charge in
  integer micro-dollars (``cost_microusd``; NULL when the price is missing),
  what the provider itself billed (``provider_cost_microusd``; NULL: it did
  not say), and whether the record is closed (the instance has ended).

Times are unix seconds (``*_unix_s``) of the clock named in ``clock``
(``provider``: the cloud's; ``store``: the controller's, when the cloud kept
no record).
"""

from __future__ import annotations

from sqlalchemy import Boolean, Column, Float, Index, Integer, String, Table, Text

from spothop.state.registry import metadata

_ID = 128
_PLACE = 128

ledger_records = Table(
    "ledger_records",
    metadata,
    Column("attempt_id", String(32), primary_key=True),
    Column("job_id", String(32), nullable=False),
    Column("node", Integer, nullable=False),
    Column("provider", String(_PLACE), nullable=False),
    Column("region", String(_PLACE), nullable=False),
    Column("zone", String(_PLACE), nullable=False),
    Column("instance_type", String(_PLACE), nullable=False),
    Column("market_kind", String(16), nullable=False),
    Column("instance_id", String(_ID), nullable=True),
    Column("currency", String(8), nullable=False),
    Column("price_usd_per_hour", Float, nullable=True),
    Column("rate_source", String(32), nullable=False),
    Column("clock", String(16), nullable=False),
    Column("usage_start_unix_s", Float, nullable=True),
    Column("usage_end_unix_s", Float, nullable=True),
    Column("usage_s", Float, nullable=False),
    Column("billed_s", Float, nullable=False),
    Column("cost_microusd", Integer, nullable=True),
    Column("provider_cost_microusd", Integer, nullable=True),
    Column("rule_json", Text, nullable=False),
    Column("tags_json", Text, nullable=False),
    Column("closed", Boolean, nullable=False),
    Column("updated_unix_s", Float, nullable=False),
    Index(None, "job_id"),
    Index(None, "provider", "usage_start_unix_s"),
)
