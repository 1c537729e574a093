"""A billing rule applied: running seconds and a price in, seconds billed and micro-dollars out.

The contract:

1. ``usage_s`` is the instance's running time on the provider's clock
   (billing starts when it runs); the provider's
   :class:`~spothop.providers.base.BillingRule` turns it into billed seconds
   (minimum, increments).
2. Money is integer micro-dollars: ``round(price × billed_s / 3600 × 10⁶)``.
3. A missing price stays missing: :func:`charge` gives ``cost_microusd``
   ``None``, never 0, so a report can say which price it lacked.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from spothop.providers.base import MICROUSD_PER_USD, BillingRule
from spothop.providers.billing import SECONDS_PER_HOUR, microusd

__all__ = ["SECONDS_PER_HOUR", "Charge", "charge", "known_price", "microusd", "usd"]


@dataclass(frozen=True)
class Charge:
    """What one attempt costs under a rule: running and billed seconds, micro-dollars (None: no price)."""

    usage_s: float
    billed_s: float
    cost_microusd: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def known_price(price_usd_per_hour: float | None, *, reserved: bool = False) -> float | None:
    """The price if it is one; None for a missing one (None, NaN, negative, or 0 outside a reservation)."""
    if price_usd_per_hour is None or not math.isfinite(price_usd_per_hour):
        return None
    if price_usd_per_hour < 0 or (price_usd_per_hour == 0 and not reserved):
        return None
    return float(price_usd_per_hour)


def charge(rule: BillingRule, usage_s: float, price_usd_per_hour: float | None) -> Charge:
    """``usage_s`` of running billed under ``rule`` at ``price_usd_per_hour`` (None: missing)."""
    usage = max(0.0, usage_s)
    billed = rule.billed_seconds(usage)
    cost = None if price_usd_per_hour is None else microusd(price_usd_per_hour, billed)
    return Charge(usage, billed, cost)


def usd(amount_microusd: int | None) -> float | None:
    """Micro-dollars as dollars, for people and JSON (None stays None)."""
    return None if amount_microusd is None else amount_microusd / MICROUSD_PER_USD
