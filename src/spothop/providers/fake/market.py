"""One fake spot market: an offering, its spot price over time, and how much it can hold.

A :class:`FakeMarket` is the live state the :class:`~spothop.testing.FakeProvider`
keeps for each offering: a step function of the spot price (set at any time,
in the provider's clock), whether spot capacity is available, and how many
spot instances it holds at once. Billing integrates the step function, so an
instance that ran across a price change pays each price for its own seconds.
"""

from __future__ import annotations

import bisect
import math
import threading
from dataclasses import dataclass, field

from spothop.errors import ConfigError
from spothop.providers.base import MICROUSD_PER_USD
from spothop.resources.offering import Offering

SECONDS_PER_HOUR = 3600.0


@dataclass
class FakeMarket:
    """The spot market of one offering.

    ``spot_price_usd_per_hour`` defaults to the offering's spot price;
    ``capacity`` is how many spot instances may be alive in it at once
    (``None``: no limit); ``available`` ``False`` refuses every spot launch.
    Price changes are kept as ``(since_s, price)`` steps; a change dated
    before the last step is a ConfigError (a market's past is not rewritten).
    """

    offering: Offering
    spot_price_usd_per_hour: float | None = None
    available: bool = True
    capacity: int | None = None
    since_s: float = 0.0  # when the first price took effect
    _steps: list[tuple[float, float]] = field(default_factory=list, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        price = self.spot_price_usd_per_hour
        if price is None:
            price = self.offering.spot_price_usd_per_hour
        if price is not None:
            _check_price(price)
            self._steps.append((self.since_s, price))

    @property
    def has_spot(self) -> bool:
        return bool(self._steps)

    def set_price(self, price_usd_per_hour: float, at_s: float) -> None:
        """The spot price from ``at_s`` on."""
        _check_price(price_usd_per_hour)
        with self._lock:
            if self._steps and at_s < self._steps[-1][0]:
                raise ConfigError(
                    f"a spot price change at {at_s} s is before the last one ({self._steps[-1][0]} s); "
                    "set prices in time order"
                )
            self._steps.append((at_s, price_usd_per_hour))

    def price_at(self, t_s: float) -> float | None:
        """The spot price in force at ``t_s`` (the first price before the market opened)."""
        with self._lock:
            if not self._steps:
                return None
            i = bisect.bisect_right([s for s, _ in self._steps], t_s) - 1
            return self._steps[max(i, 0)][1]

    def spot_cost_microusd(self, start_s: float, end_s: float) -> int:
        """What a spot instance pays for ``[start_s, end_s)``, integer micro-dollars."""
        if end_s <= start_s or not self._steps:
            return 0
        with self._lock:
            steps = list(self._steps)
        usd = 0.0
        for i, (since, price) in enumerate(steps):
            until = steps[i + 1][0] if i + 1 < len(steps) else math.inf
            lo = start_s if i == 0 else max(start_s, since)
            hi = min(end_s, until)
            if hi > lo:
                usd += price * (hi - lo) / SECONDS_PER_HOUR
        return round(usd * MICROUSD_PER_USD)


def fixed_cost_microusd(price_usd_per_hour: float, seconds: float) -> int:
    """What ``seconds`` at a fixed rate cost, integer micro-dollars (on-demand billing)."""
    return round(price_usd_per_hour * max(seconds, 0.0) / SECONDS_PER_HOUR * MICROUSD_PER_USD)


def _check_price(price: float) -> None:
    if not (math.isfinite(price) and price > 0):
        raise ConfigError(
            f"a spot price must be a finite number of USD per hour above 0, got {price}"
        )
