"""The spot market simulator: many markets, replayed from traces or generated, on one clock.

Times are simulated unix seconds. A market's trace offset is
``t − sim_start + start_offset_s``; traces wrap past their end (see
:mod:`spothop.market.availability`). The market is a pure function of its
sources, ``sim_start`` and ``seed``: two processes building the same
``SpotMarket`` answer every question identically. Each query costs O(log n).

Example: a p3.2xlarge market replaying a Can't Be Late trace from its start::

    trace = read_trace(".../preemption-1node-aws-2023-04-22/us-east-1c_v100_1.json")
    key = MarketId("aws", "us-east-1", "us-east-1c", "p3.2xlarge")
    market = SpotMarket({key: MarketSource(trace=trace)},
                        sim_start=clock.now())
    market.next_preemption_after(key, clock.now())   # when the instance would be taken
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from spothop.market.availability import AvailabilityTrace
from spothop.market.price_history import PriceSeries
from spothop.market.synthetic import SyntheticMarketParams, derive_seed, generate_market
from spothop.resources.market_id import MarketId

DEFAULT_SYNTHETIC_HORIZON_S = 30 * 86400.0  # a month; synthetic markets wrap after it


@dataclass(frozen=True, eq=False)
class MarketSource:
    """Where one market's availability and price come from.

    Give exactly one of ``trace`` or ``synthetic``. ``start_offset_s`` is where
    in the trace ``sim_start`` falls; ``None`` draws a whole-tick offset from
    the world seed. The price is, in order of preference: ``prices`` (its own
    time axis, offset ``t − sim_start``), the trace's own per-tick prices,
    ``spot_ratio × on_demand_price_usd_per_hour``, or the synthetic walk.
    """

    trace: AvailabilityTrace | None = None
    synthetic: SyntheticMarketParams | None = None
    start_offset_s: float | None = 0.0
    prices: PriceSeries | None = None
    spot_ratio: float | None = None
    on_demand_price_usd_per_hour: float | None = None

    def __post_init__(self) -> None:
        if (self.trace is None) == (self.synthetic is None):
            raise ValueError("MarketSource needs exactly one of trace= or synthetic=")
        if self.start_offset_s is not None and not (
            self.start_offset_s >= 0 and math.isfinite(self.start_offset_s)
        ):
            raise ValueError(f"start_offset_s must be finite and >= 0, got {self.start_offset_s}")
        if (self.spot_ratio is None) != (self.on_demand_price_usd_per_hour is None):
            raise ValueError("give spot_ratio= and on_demand_price_usd_per_hour= together")


@dataclass(frozen=True, eq=False)
class _Market:
    trace: AvailabilityTrace
    start_offset_s: float
    prices: PriceSeries | None  # on the t − sim_start axis
    trace_prices: bool
    fixed_price_usd_per_hour: float | None


class SpotMarket:
    """Many spot markets answering "how many now", "what price" and "until when".

    Deterministic under ``seed``: synthetic markets and drawn start offsets use
    per-market streams from :func:`derive_seed`, so adding a market changes no other.
    ``t`` before ``sim_start`` raises ``ValueError``; an unknown key raises ``KeyError``.
    """

    def __init__(
        self,
        sources: Mapping[MarketId, MarketSource],
        sim_start: float,
        seed: int = 0,
        synthetic_horizon_s: float = DEFAULT_SYNTHETIC_HORIZON_S,
    ) -> None:
        self.sim_start = float(sim_start)
        self.seed = seed
        self._markets = {
            key: self._resolve(key, src, synthetic_horizon_s) for key, src in sources.items()
        }

    def _resolve(self, key: MarketId, src: MarketSource, horizon_s: float) -> _Market:
        walk: PriceSeries | None = None
        if src.synthetic is not None:
            generated = generate_market(
                src.synthetic, derive_seed(self.seed, key.slug), horizon_s, name=key.slug
            )
            trace, walk = generated.trace, generated.prices
        else:
            assert src.trace is not None  # MarketSource guarantees one of the two
            trace = src.trace
        offset = src.start_offset_s
        if offset is None:
            offset = derive_seed(self.seed, key.slug + "#start") % len(trace) * trace.tick_s
        fixed = None
        if src.spot_ratio is not None and src.on_demand_price_usd_per_hour is not None:
            fixed = src.spot_ratio * src.on_demand_price_usd_per_hour
        has_trace_prices = src.prices is None and trace.prices_usd_per_hour is not None
        if src.prices is None and not has_trace_prices and fixed is None and walk is None:
            raise ValueError(
                f"market {key.slug} has no price: give prices=, or spot_ratio= and "
                "on_demand_price_usd_per_hour=, or a trace that carries prices"
            )
        prices = src.prices if src.prices is not None else (None if fixed is not None else walk)
        return _Market(trace, offset, prices, has_trace_prices, fixed)

    def __iter__(self) -> Iterator[MarketId]:
        return iter(self._markets)

    def __len__(self) -> int:
        return len(self._markets)

    def keys(self) -> list[MarketId]:
        return list(self._markets)

    def trace(self, key: MarketId) -> AvailabilityTrace:
        """The trace a market replays (generated, for a synthetic one)."""
        return self._market(key).trace

    def start_offset_s(self, key: MarketId) -> float:
        """Where in its trace the market stood at ``sim_start`` (given or drawn)."""
        return self._market(key).start_offset_s

    def _market(self, key: MarketId) -> _Market:
        try:
            return self._markets[key]
        except KeyError:
            raise KeyError(f"no market {key.slug} (the simulator has {len(self)})") from None

    def _offset(self, market: _Market, t: float) -> float:
        if t < self.sim_start or not math.isfinite(t):
            raise ValueError(f"time {t} is before the market's sim_start {self.sim_start}")
        return t - self.sim_start + market.start_offset_s

    def available(self, key: MarketId, t: float) -> int:
        """Instances of ``key`` obtainable at simulated time ``t``."""
        market = self._market(key)
        return market.trace.available_at(self._offset(market, t))

    def is_available(self, key: MarketId, t: float, need: int = 1) -> bool:
        return self.available(key, t) >= need

    def price_usd_per_hour(self, key: MarketId, t: float) -> float:
        """The spot price of ``key`` at ``t`` (whether or not capacity is there)."""
        market = self._market(key)
        offset = self._offset(market, t)
        if market.prices is not None:
            return market.prices.price_at(t - self.sim_start)
        if market.trace_prices:
            price = market.trace.price_at(offset)
            assert price is not None  # trace_prices is set only when the trace has prices
            return price
        assert market.fixed_price_usd_per_hour is not None  # checked in _resolve
        return market.fixed_price_usd_per_hour

    def price_steps(self, key: MarketId, start: float, end: float) -> list[tuple[float, float]]:
        """The spot price of ``key`` as a step function over ``start … end``: ``(start, price in
        force)`` first, then ``(t, new price)`` for every change at ``t`` in ``(start, end]``.

        A change's time depends only on the market (the index of the step it
        begins, never on ``start`` or ``end``), so queries over adjoining spans
        list exactly the changes one query over their union lists: an instance
        billed tick by tick and a ledger pricing the whole run see the same steps.
        """
        market = self._market(key)
        changes: list[tuple[float, float]] = []
        if market.prices is not None:
            found = _series_changes(market.prices, start - self.sim_start, end - self.sim_start)
            changes = [(self.sim_start + u, p) for u, p in found]
        elif market.trace_prices:
            base = market.start_offset_s
            found = _trace_changes(
                market.trace, self._offset(market, start), end - self.sim_start + base
            )
            changes = [(self.sim_start + (u - base), p) for u, p in found]
        # The price in force at ``start``: the last change at or before it (so a start a hair
        # past a change's time has that change's price), else the lookup's.
        before = [p for t, p in changes if t <= start]
        at_start = before[-1] if before else self.price_usd_per_hour(key, start)
        return [(float(start), at_start), *((t, p) for t, p in changes if start < t <= end)]

    def next_preemption_after(self, key: MarketId, t: float, need: int = 1) -> float | None:
        """The first time > ``t`` at which availability drops from ≥ ``need`` to below it.

        If ``key`` is short of ``need`` at ``t``, this is the drop after the next
        recovery. None when it never drops.
        """
        market = self._market(key)
        offset = self._offset(market, t)
        drop = market.trace.next_drop_after(offset, need)
        return None if drop is None else t + (drop - offset)

    def next_available_after(self, key: MarketId, t: float, need: int = 1) -> float | None:
        """``t`` if ``need`` instances are obtainable at ``t``, else when they next are; None if never."""
        market = self._market(key)
        offset = self._offset(market, t)
        back = market.trace.next_available_after(offset, need)
        return None if back is None else t + (back - offset)


def _series_changes(series: PriceSeries, u0: float, u1: float) -> list[tuple[float, float]]:
    """Every change of a wrapping price series from just before ``u0`` to just after ``u1``
    (offsets ``cycle · duration + offsets[i]``, computed from the index alone), with its price."""
    offsets, prices, period = series.offsets_s, series.price_usd_per_hour, series.duration_s
    n = len(offsets)
    out: list[tuple[float, float]] = []
    first = max(0, math.floor(u0 / period) * n + bisect_right(series._offsets, u0 % period) - 2)
    k = first
    while True:
        cycle, i = divmod(k, n)
        u = cycle * period + float(offsets[i])
        if u > u1 + period / n:
            return out
        if k > 0 and prices[i] != prices[i - 1 if i else n - 1]:
            out.append((u, float(prices[i])))
        k += 1


def _trace_changes(trace: AvailabilityTrace, u0: float, u1: float) -> list[tuple[float, float]]:
    """Every change of a trace's own per-tick price from just before ``u0`` to just after
    ``u1`` (offsets ``k · tick_s``, from the tick index alone), with its price."""
    prices = trace.prices_usd_per_hour
    assert prices is not None  # only markets whose trace carries prices ask
    n = len(prices)
    out: list[tuple[float, float]] = []
    k = max(1, math.floor(u0 / trace.tick_s) - 1)
    while (u := k * trace.tick_s) <= u1 + trace.tick_s:
        if prices[k % n] != prices[(k - 1) % n]:
            out.append((u, float(prices[k % n])))
        k += 1
    return out
