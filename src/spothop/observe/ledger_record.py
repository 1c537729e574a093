"""One attempt's billing record, as the ledger keeps it and as a row of ``ledger_records``.

:class:`LedgerRecord` is what :class:`~spothop.observe.ledger.Ledger` writes
and reads (its contract is :mod:`spothop.observe.ledger`'s): frozen, with the
charge in integer micro-dollars (None: the price is missing, never 0).
:func:`record_row` and :func:`record_from_row` map it to and from its row
(the billing rule and the tags as JSON); the two are inverse.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spothop.observe.billing import usd


@dataclass(frozen=True)
class LedgerRecord:
    """One attempt's billing record (see the module's contract)."""

    attempt_id: str
    job_id: str
    node: int
    provider: str
    region: str
    zone: str
    instance_type: str
    market_kind: str
    instance_id: str | None
    currency: str
    price_usd_per_hour: float | None
    rate_source: str
    clock: str
    usage_start_unix_s: float | None
    usage_end_unix_s: float | None
    usage_s: float
    billed_s: float
    cost_microusd: int | None
    provider_cost_microusd: int | None
    rule: Mapping[str, Any]
    tags: Mapping[str, str]
    closed: bool

    @property
    def price_missing(self) -> bool:
        return self.cost_microusd is None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with ``cost_usd`` beside the micro-dollars."""
        return {
            "attempt_id": self.attempt_id,
            "job_id": self.job_id,
            "node": self.node,
            "provider": self.provider,
            "region": self.region,
            "zone": self.zone,
            "instance_type": self.instance_type,
            "market": self.market_kind,
            "instance_id": self.instance_id,
            "currency": self.currency,
            "price_usd_per_hour": self.price_usd_per_hour,
            "price_missing": self.price_missing,
            "rate_source": self.rate_source,
            "clock": self.clock,
            "usage_start_unix_s": self.usage_start_unix_s,
            "usage_end_unix_s": self.usage_end_unix_s,
            "usage_s": self.usage_s,
            "billed_s": self.billed_s,
            "cost_microusd": self.cost_microusd,
            "cost_usd": usd(self.cost_microusd),
            "provider_cost_microusd": self.provider_cost_microusd,
            "rule": dict(self.rule),
            "tags": dict(self.tags),
            "closed": self.closed,
        }


def record_row(r: LedgerRecord, now: float) -> dict[str, Any]:
    """The record as a row of ``ledger_records``, written at ``now`` (unix s)."""
    return {
        "attempt_id": r.attempt_id,
        "job_id": r.job_id,
        "node": r.node,
        "provider": r.provider,
        "region": r.region,
        "zone": r.zone,
        "instance_type": r.instance_type,
        "market_kind": r.market_kind,
        "instance_id": r.instance_id,
        "currency": r.currency,
        "price_usd_per_hour": r.price_usd_per_hour,
        "rate_source": r.rate_source,
        "clock": r.clock,
        "usage_start_unix_s": r.usage_start_unix_s,
        "usage_end_unix_s": r.usage_end_unix_s,
        "usage_s": r.usage_s,
        "billed_s": r.billed_s,
        "cost_microusd": r.cost_microusd,
        "provider_cost_microusd": r.provider_cost_microusd,
        "rule_json": json.dumps(dict(r.rule)),
        "tags_json": json.dumps(dict(r.tags)),
        "closed": r.closed,
        "updated_unix_s": now,
    }


def record_from_row(m: Mapping[str, Any]) -> LedgerRecord:
    """The record a row of ``ledger_records`` holds."""
    values = {k: v for k, v in m.items() if k not in ("rule_json", "tags_json", "updated_unix_s")}
    return LedgerRecord(
        **values,
        rule=json.loads(m["rule_json"]),
        tags=json.loads(m["tags_json"]),
    )
