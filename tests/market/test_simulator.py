import numpy as np
import pytest

from spothop.market import (
    AvailabilityTrace,
    ManualClock,
    MarketId,
    MarketSource,
    PriceSeries,
    SpotMarket,
    SyntheticMarketParams,
    read_trace,
)
from tests.conftest import shared_path

SIM_START = 1_700_000_000.0
KEY = MarketId("aws", "us-east-1", "us-east-1c", "p3.2xlarge")
OTHER = MarketId("gcp", "us-central1", "us-central1-a", "a2-highgpu-8g")
SYNTH = SyntheticMarketParams(
    mean_time_between_preemptions_s=3 * 3600,
    mean_outage_s=1800,
    capacity=2,
    on_demand_price_usd_per_hour=3.06,
)


def fixed(trace: AvailabilityTrace, start_offset_s: float | None = 0.0) -> MarketSource:
    return MarketSource(
        trace=trace,
        start_offset_s=start_offset_s,
        spot_ratio=0.3,
        on_demand_price_usd_per_hour=3.06,
    )


def small() -> AvailabilityTrace:
    return AvailabilityTrace("s", 10.0, np.asarray([2, 2, 0, 1, 2]), capacity=2)


def brute_next_preemption(
    market: SpotMarket, key: MarketId, t: float, need: int, tick_s: float
) -> float | None:
    """Scan tick boundaries after t for the first fall from >= need to < need."""
    boundary = SIM_START + (int((t - SIM_START) // tick_s) + 1) * tick_s
    for _ in range(2 * len(market.trace(key)) + 1):
        if market.available(key, boundary - tick_s) >= need > market.available(key, boundary):
            return boundary
        boundary += tick_s
    return None


def test_time_maps_to_trace_offset_at_exact_tick_boundaries():
    market = SpotMarket({KEY: fixed(small())}, sim_start=SIM_START)
    assert [market.available(KEY, SIM_START + 10 * k) for k in range(7)] == [2, 2, 0, 1, 2, 2, 2]
    assert market.available(KEY, SIM_START + 19.999) == 2
    assert market.is_available(KEY, SIM_START + 30) and not market.is_available(
        KEY, SIM_START + 30, need=2
    )


def test_start_offset_shifts_the_trace():
    market = SpotMarket({KEY: fixed(small(), start_offset_s=20.0)}, sim_start=SIM_START)
    assert market.available(KEY, SIM_START) == 0
    assert market.next_available_after(KEY, SIM_START) == SIM_START + 10
    assert market.next_available_after(KEY, SIM_START, need=2) == SIM_START + 20
    assert market.next_preemption_after(KEY, SIM_START + 5) == SIM_START + 50  # wraps to tick 2


def test_next_preemption_matches_brute_force_on_a_real_trace():
    trace = read_trace(
        shared_path(
            "traces", "cant-be-late", "preemption-4node-aws-2023-08-03", "us-west-2c_v100_1.json"
        )
    )
    market = SpotMarket({KEY: fixed(trace, start_offset_s=1234.0)}, sim_start=SIM_START)
    rng = np.random.default_rng(3)
    for t in SIM_START + rng.uniform(0, 2 * trace.duration_s, 60):
        for need in (1, 4):
            expected = brute_next_preemption(market, KEY, float(t), need, trace.tick_s)
            got = market.next_preemption_after(KEY, float(t), need)
            assert got == pytest.approx(expected), (t, need)


def test_a_manual_clock_stepping_tick_by_tick_meets_the_predicted_preemption():
    trace = read_trace(
        shared_path(
            "traces", "cant-be-late", "preemption-1node-aws-2023-04-22", "us-east-1c_v100_1.json"
        )
    )
    clock = ManualClock(SIM_START)
    market = SpotMarket(
        {KEY: MarketSource(trace=trace)}, sim_start=SIM_START
    )  # prices from the trace
    assert market.price_usd_per_hour(KEY, clock.now()) == pytest.approx(0.918)
    predicted = market.next_preemption_after(KEY, clock.now())
    assert market.is_available(KEY, clock.now()) and predicted is not None
    while market.is_available(KEY, clock.now()):
        clock.advance(trace.tick_s)
    assert clock.now() == pytest.approx(predicted)


def test_prices_by_source():
    series = PriceSeries.regular(100.0, [1.0, 2.0])
    market = SpotMarket(
        {KEY: fixed(small()), OTHER: MarketSource(trace=small(), prices=series)},
        sim_start=SIM_START,
    )
    assert market.price_usd_per_hour(KEY, SIM_START + 5) == pytest.approx(0.918)
    assert market.price_usd_per_hour(OTHER, SIM_START + 150) == 2.0


def test_synthetic_markets_are_deterministic_and_independent():
    world = {KEY: MarketSource(synthetic=SYNTH), OTHER: MarketSource(synthetic=SYNTH)}
    a = SpotMarket(world, sim_start=SIM_START, seed=42)
    b = SpotMarket(world, sim_start=SIM_START, seed=42)
    alone = SpotMarket({KEY: world[KEY]}, sim_start=SIM_START, seed=42)
    assert np.array_equal(a.trace(KEY).counts, b.trace(KEY).counts)
    assert np.array_equal(a.trace(KEY).counts, alone.trace(KEY).counts)  # others do not perturb it
    assert not np.array_equal(a.trace(KEY).counts, a.trace(OTHER).counts)
    times = SIM_START + np.linspace(0, 86400, 97)
    assert [a.price_usd_per_hour(KEY, t) for t in times] == [
        b.price_usd_per_hour(KEY, t) for t in times
    ]
    assert not np.array_equal(
        SpotMarket(world, SIM_START, seed=43).trace(KEY).counts, a.trace(KEY).counts
    )


def test_drawn_start_offsets_are_seeded_and_on_tick_boundaries():
    trace = read_trace(shared_path("traces", "spothedge-gcp-a100", "us-west1-b_a100_40gb_8.json"))
    source = fixed(trace, start_offset_s=None)
    one = SpotMarket({KEY: source}, SIM_START, seed=1)
    again = SpotMarket({KEY: source}, SIM_START, seed=1)
    offsets = {SpotMarket({KEY: source}, SIM_START, seed=s).start_offset_s(KEY) for s in range(5)}
    assert one.start_offset_s(KEY) == again.start_offset_s(KEY)
    assert len(offsets) > 1 and all(o % trace.tick_s == 0 for o in offsets)


def test_misuse_raises_clear_errors():
    market = SpotMarket({KEY: fixed(small())}, sim_start=SIM_START)
    with pytest.raises(ValueError, match="before the market's sim_start"):
        market.available(KEY, SIM_START - 1)
    with pytest.raises(KeyError, match="no market gcp/us-central1-a"):
        market.available(OTHER, SIM_START)
    with pytest.raises(ValueError, match="no price"):
        SpotMarket({KEY: MarketSource(trace=small())}, SIM_START)
    with pytest.raises(ValueError, match="exactly one"):
        MarketSource(trace=small(), synthetic=SYNTH)
    with pytest.raises(ValueError, match="together"):
        MarketSource(trace=small(), spot_ratio=0.3)
