"""A market's price as steps: adjoining spans list the changes of their union, at the prices in force."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from spothop.market import (
    AvailabilityTrace,
    MarketId,
    MarketSource,
    PriceSeries,
    SpotMarket,
    SyntheticMarketParams,
)

SIM_START = 1_700_000_123.456
KEY = MarketId("aws", "us-east-1", "us-east-1a", "g4dn.xlarge")


def synthetic() -> MarketSource:
    params = SyntheticMarketParams(
        mean_time_between_preemptions_s=3600,
        mean_outage_s=600,
        capacity=2,
        on_demand_price_usd_per_hour=0.526,
        spot_ratio=0.3,
        price_std_ratio=0.2,
    )
    return MarketSource(synthetic=params, start_offset_s=None)


def traced() -> MarketSource:
    counts = np.ones(7, dtype=np.int64)
    trace = AvailabilityTrace(
        "t", 30.0, counts, capacity=1, prices_usd_per_hour=np.asarray([1, 1, 2, 3, 3, 2, 1.5])
    )
    return MarketSource(trace=trace, start_offset_s=45.0)


def series() -> MarketSource:
    counts = np.ones(3, dtype=np.int64)
    prices = PriceSeries(np.asarray([0.0, 100.0, 250.0]), np.asarray([0.5, 0.7, 0.6]), 400.0)
    return MarketSource(trace=AvailabilityTrace("c", 60.0, counts, capacity=1), prices=prices)


SOURCES = {"synthetic walk": synthetic, "trace prices": traced, "price series": series}


@pytest.mark.parametrize("source", SOURCES.values(), ids=list(SOURCES))
def test_adjoining_spans_list_the_changes_of_their_union(source):
    market = SpotMarket({KEY: source()}, sim_start=SIM_START, seed=3)
    start, end = SIM_START + 17.3, SIM_START + 5 * 3600.0
    whole = market.price_steps(KEY, start, end)
    rng = random.Random(5)
    cuts, t = [start], start
    while t < end:
        t = min(end, t + rng.uniform(0.01, 90.0))  # ticks of a host: irregular, some tiny
        cuts.append(t)
    pieces = [(start, market.price_steps(KEY, start, start)[0][1])]
    for a, b in itertools.pairwise(cuts):
        pieces.extend(market.price_steps(KEY, a, b)[1:])
    assert pieces == whole
    assert len(whole) > 3  # the price moved


@pytest.mark.parametrize("source", SOURCES.values(), ids=list(SOURCES))
def test_each_step_holds_the_price_the_market_quotes_inside_it(source):
    market = SpotMarket({KEY: source()}, sim_start=SIM_START, seed=3)
    start, end = SIM_START + 1.0, SIM_START + 3 * 3600.0
    steps = market.price_steps(KEY, start, end)
    assert steps[0][0] == start and all(a[0] < b[0] for a, b in itertools.pairwise(steps))
    bounds = [t for t, _ in steps] + [end]
    for (t, price), next_t in zip(steps, bounds[1:], strict=True):
        assert market.price_usd_per_hour(KEY, (t + next_t) / 2) == price
        assert next_t == end or price != steps[bounds.index(next_t)][1]  # a step is a change


def test_a_fixed_price_market_has_one_step():
    trace = AvailabilityTrace("f", 10.0, np.asarray([1, 0, 1]), capacity=1)
    source = MarketSource(trace=trace, spot_ratio=0.3, on_demand_price_usd_per_hour=2.0)
    market = SpotMarket({KEY: source}, sim_start=SIM_START)
    assert market.price_steps(KEY, SIM_START, SIM_START + 86400) == [(SIM_START, 0.6)]
