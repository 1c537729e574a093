"""Seeded synthetic spot markets: availability as an alternating renewal process,
price as a mean-reverting (Ornstein–Uhlenbeck) walk.

Availability alternates between *up* periods (all ``capacity`` instances
obtainable) and *outages* (none). Period lengths are geometric in whole ticks,
the discrete twin of the exponential, with means ``mean_time_between_preemptions_s``
and ``mean_outage_s`` exactly. The first period is up with the long-run
probability ``mtbp / (mtbp + outage)``.

The price follows the exact discretisation of
``dX = θ(μ − X)dt + σ dW`` with ``μ = spot_ratio × on_demand``,
``θ = ln 2 / half-life`` and ``σ = std_ratio · μ · √(2θ)`` (so the stationary
standard deviation is ``std_ratio · μ``), clipped to ``[floor, on_demand]``.

Same parameters and seed, same market. Each market of a world gets its own
stream from :func:`derive_seed` (a BLAKE2 hash of the world seed and the market's
name, stable across processes and Python versions, unlike ``hash()``).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from spothop.market.availability import AvailabilityTrace, FloatArray, IntArray
from spothop.market.price_history import PriceSeries


def derive_seed(world_seed: int, key: str) -> int:
    """A 64-bit seed for one market, stable across runs, processes and platforms."""
    digest = hashlib.blake2b(f"{world_seed}\x1f{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class SyntheticMarketParams(BaseModel):
    """What a synthetic market looks like. Times in seconds, prices in USD per hour."""

    model_config = ConfigDict(frozen=True)

    mean_time_between_preemptions_s: float = Field(gt=0, allow_inf_nan=False)
    """Mean length of an up period: how long an instance started at its start lives."""
    mean_outage_s: float = Field(gt=0, allow_inf_nan=False)
    capacity: int = Field(default=1, ge=1)
    on_demand_price_usd_per_hour: float = Field(gt=0, allow_inf_nan=False)
    spot_ratio: float = Field(default=0.3, gt=0, le=1)
    price_std_ratio: float = Field(default=0.1, ge=0, allow_inf_nan=False)
    price_half_life_s: float = Field(default=6 * 3600.0, gt=0, allow_inf_nan=False)
    floor_ratio: float = Field(default=0.05, gt=0, le=1)
    tick_s: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    price_tick_s: float = Field(default=300.0, gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _means_cover_a_tick(self) -> SyntheticMarketParams:
        for name in ("mean_time_between_preemptions_s", "mean_outage_s"):
            if getattr(self, name) < self.tick_s:
                raise ValueError(f"{name} must be at least tick_s ({self.tick_s} s)")
        return self


@dataclass(frozen=True, eq=False)
class SyntheticMarket:
    """One generated market: its availability trace and its price series."""

    trace: AvailabilityTrace
    prices: PriceSeries


def _availability(
    params: SyntheticMarketParams, rng: np.random.Generator, n_ticks: int
) -> IntArray:
    p_end_up = params.tick_s / params.mean_time_between_preemptions_s
    p_end_down = params.tick_s / params.mean_outage_s
    up_share = params.mean_time_between_preemptions_s / (
        params.mean_time_between_preemptions_s + params.mean_outage_s
    )
    up = bool(rng.random() < up_share)
    counts = np.empty(n_ticks, dtype=np.int64)
    filled = 0
    while filled < n_ticks:
        run = int(rng.geometric(p_end_up if up else p_end_down))
        counts[filled : filled + run] = params.capacity if up else 0
        filled += run
        up = not up
    return counts


def _price_walk(
    params: SyntheticMarketParams, rng: np.random.Generator, n_steps: int
) -> FloatArray:
    mean = params.spot_ratio * params.on_demand_price_usd_per_hour
    theta = math.log(2) / params.price_half_life_s
    std = params.price_std_ratio * mean
    decay = math.exp(-theta * params.price_tick_s)
    step_std = std * math.sqrt(1 - decay * decay)
    shocks = rng.standard_normal(n_steps)
    walk = np.empty(n_steps, dtype=np.float64)
    walk[0] = mean + std * shocks[0]  # start in the stationary distribution
    for i in range(1, n_steps):
        walk[i] = mean + (walk[i - 1] - mean) * decay + step_std * shocks[i]
    floor = params.floor_ratio * params.on_demand_price_usd_per_hour
    return np.clip(walk, floor, params.on_demand_price_usd_per_hour)


def generate_market(
    params: SyntheticMarketParams, seed: int, horizon_s: float, name: str = "synthetic"
) -> SyntheticMarket:
    """Generate ``horizon_s`` seconds of one market (rounded up to whole ticks).

    Availability and price draw from separate child streams of ``seed``, so
    changing a price parameter leaves the availability unchanged.
    """
    if not horizon_s > 0:
        raise ValueError(f"horizon_s must be > 0, got {horizon_s}")
    avail_rng, price_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    counts = _availability(params, avail_rng, max(1, math.ceil(horizon_s / params.tick_s)))
    walk = _price_walk(params, price_rng, max(1, math.ceil(horizon_s / params.price_tick_s)))
    trace = AvailabilityTrace(
        name=name,
        tick_s=params.tick_s,
        counts=counts,
        capacity=params.capacity,
        source=f"synthetic(seed={seed})",
        metadata={"params": params.model_dump()},
    )
    return SyntheticMarket(trace=trace, prices=PriceSeries.regular(params.price_tick_s, walk))
