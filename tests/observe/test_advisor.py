"""The advisor's predictions against an independent event simulation, and its recommendations."""

from __future__ import annotations

import datetime as dt
import heapq
import random

import pytest

from spothop.observe.advisor import MarketModel, advise, simulate_option
from spothop.resources.offering import Interconnect, Offering
from spothop.scheduler.market_view import MarketKind
from spothop.scheduler.placement import Candidate

RUNS = 300
WORK_H = 8.0


def event_sim(m: MarketModel, work_s: float, rng: random.Random) -> float:
    """An event-queue simulation of one node on one market: the paid micro-dollars.

    Independent of the advisor's segment loop: the Poisson process is drawn as absolute
    arrival times on the instance's running clock, and checkpoint completions and
    preemptions are events in one heap.
    """
    rate_per_s = m.preemption_rate_per_h / 3600.0
    paid_s = m.boot_s
    committed = 0.0  # work kept by the last checkpoint
    while True:
        # An instance starts working from the checkpoint; its preemption time on its own clock.
        preempt_at = rng.expovariate(rate_per_s) if rate_per_s > 0 else float("inf")
        events: list[tuple[float, str, float]] = [(preempt_at, "preempt", 0.0)]
        clock, done = 0.0, committed
        while done < work_s - 1e-9:
            step = min(m.interval_s, work_s - done)
            done += step
            clock += step + (0.0 if done >= work_s - 1e-9 else m.save_s)
            heapq.heappush(events, (clock, "checkpoint", done))
        while events:
            at, kind, work = heapq.heappop(events)
            if kind == "preempt":
                paid_s += at + m.boot_s + m.restart_s
                break
            committed = work
            if committed >= work_s - 1e-9:
                paid_s += at
                return m.price_usd_per_hour * 1e6 * paid_s / 3600.0
        # Preempted before the end: the replacement resumes from `committed`.


MARKETS = [
    MarketModel("calm", "spot", 1.2, 0.02, 1800, 30, 60, 90),
    MarketModel("moderate", "spot", 1.0, 0.3, 1200, 60, 120, 90),
    MarketModel("stormy", "spot", 0.8, 2.0, 600, 45, 90, 60),
    MarketModel("on-demand", "on-demand", 3.0, 0.0, 3600, 30, 60, 90),
]


@pytest.mark.parametrize("market", MARKETS, ids=[m.label for m in MARKETS])
def test_predicted_mean_cost_within_10_percent_of_simulated(market: MarketModel) -> None:
    work_s = WORK_H * 3600
    predicted = simulate_option(
        "x", "x", [(market, None)], work_s, RUNS, random.Random(1)
    ).cost_microusd.mean
    rng = random.Random(99)
    outcomes = [event_sim(market, work_s, rng) for _ in range(RUNS)]
    simulated = sum(outcomes) / len(outcomes)
    assert abs(predicted - simulated) / simulated < 0.10, (predicted, simulated)


def _candidate(zone: str, kind: MarketKind, price: float, rate: float) -> Candidate:
    offering = Offering(
        provider="sim",
        region="r1",
        zone=zone,
        instance_type="g.x",
        gpu="A10G",
        gpu_count=1,
        vcpus=4,
        memory_gib=16,
        interconnect=Interconnect.PCIE,
        price_date=dt.date(2026, 1, 1),
        on_demand_price_usd_per_hour=3.0,
    )
    factors = {"checkpoint_interval_s": 1200.0, "save_s": 60.0, "restart_s": 120.0, "boot_s": 90.0}
    return Candidate(offering, kind, price, rate, 100.0, 1.0, 0.0, price / 100.0, factors)


def test_spot_recommended_when_calm_and_on_demand_when_stormy() -> None:
    od = _candidate("z1", MarketKind.ON_DEMAND, 3.0, 0.0)
    calm = [
        od,
        _candidate("z1", MarketKind.SPOT, 0.9, 0.05),
        _candidate("z2", MarketKind.SPOT, 1.0, 0.1),
    ]
    advice = advise(calm, work_h=4, runs=100)
    assert advice.recommended.startswith("spot/"), advice.reason
    names = {o.name for o in advice.options}
    assert {"on-demand", "spot/aggressive", "spot/balanced", "spot/conservative"} <= names
    for o in advice.options:
        assert o.cost_microusd.p10 <= o.cost_microusd.mean <= o.cost_microusd.p90

    stormy = [
        od,
        _candidate("z1", MarketKind.SPOT, 2.6, 6.0),
        _candidate("z2", MarketKind.SPOT, 2.7, 6.0),
    ]
    advice = advise(stormy, work_h=4, runs=100)
    assert advice.recommended == "on-demand"
    assert advice.reason.startswith("use on-demand")


def test_reserved_plus_spot_option_with_a_rate() -> None:
    od = _candidate("z1", MarketKind.ON_DEMAND, 3.0, 0.0)
    spot = _candidate("z1", MarketKind.SPOT, 1.0, 0.2)
    advice = advise([od, spot], work_h=2, nodes=3, runs=50, reserved_usd_per_hour=1.5)
    option = advice.option("reserved+spot")
    assert "1 node(s) reserved" in option.description
    assert advice.to_dict()["options"]


def test_same_seed_same_advice() -> None:
    cands = [
        _candidate("z1", MarketKind.ON_DEMAND, 3.0, 0.0),
        _candidate("z1", MarketKind.SPOT, 1.0, 0.5),
    ]
    assert advise(cands, work_h=3, runs=40).to_dict() == advise(cands, work_h=3, runs=40).to_dict()
