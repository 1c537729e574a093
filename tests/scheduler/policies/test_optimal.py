"""The offline oracle: exact on tiny traces (against every schedule), never above an online policy."""

from __future__ import annotations

import itertools
import random

import pytest

from spothop.scheduler.policies import IDLE, ON_DEMAND, Decision, Kind, Policy, get_policy
from spothop.scheduler.policies.optimal import solve
from spothop.scheduler.simulate import JobSetting, Window, run, zone_from_flags
from spothop.scheduler.simulate.traces import load_zone, windows
from tests.conftest import shared_path

H = 3600.0


class Scripted(Policy):
    name = "scripted"
    online = False

    def __init__(self, decisions: tuple[Decision, ...]) -> None:
        self.decisions = decisions

    def decide(self, state):  # type: ignore[no-untyped-def]
        t = round(state.elapsed_s / state.tick_s)
        return self.decisions[t] if t < len(self.decisions) else ON_DEMAND


def _brute_force(window: Window, setting: JobSetting, ticks: int) -> float:
    choices = [IDLE, ON_DEMAND] + [Decision(Kind.SPOT, z) for z in range(len(window.zones))]
    best = float("inf")
    for script in itertools.product(choices, repeat=ticks):
        result = run(Scripted(script), window, setting)
        if result.deadline_met:
            best = min(best, result.cost_usd)
    return best


@pytest.mark.parametrize("overhead_h", [0.0, 0.4, 1.0, 1.6])
def test_the_programme_finds_the_cheapest_of_every_schedule(overhead_h: float) -> None:
    rng = random.Random(7)
    setting = JobSetting(
        task_s=3 * H,
        deadline_s=6 * H,
        restart_overhead_s=overhead_h * H,
        spot_price_usd_per_hour=1.0,
        on_demand_price_usd_per_hour=3.0,
    )
    for _ in range(6):
        zones = tuple(
            zone_from_flags(
                name,
                [rng.random() < 0.6 for _ in range(6)],
                H,
                [rng.choice([0.8, 1.0, 1.3]) for _ in range(6)],
            )
            for name in ("a", "b")
        )
        window = Window(zones[: rng.choice([1, 2])], 0)
        plan = solve(window, setting)
        assert plan.cost_usd == pytest.approx(_brute_force(window, setting, 6))
        replayed = run(get_policy("optimal"), window, setting)
        assert replayed.deadline_met
        assert replayed.cost_usd == pytest.approx(plan.cost_usd)


@pytest.mark.parametrize("deadline_h", [52, 70])
@pytest.mark.parametrize("overhead_h", [0.02, 0.1])
def test_optimal_is_never_above_an_online_policy_on_any_run(
    deadline_h: int, overhead_h: float
) -> None:
    folder = shared_path("traces", "cant-be-late", "availability-1node-aws-2022-10-26")
    setting = JobSetting(deadline_s=deadline_h * H, restart_overhead_s=overhead_h * H)
    zones = [
        load_zone(folder / "us-west-2a_v100_1.json"),
        load_zone(folder / "us-west-2b_v100_1.json"),
    ]
    for group in ([zones[0]], [zones[1]], zones):
        for window in windows(group, setting, count=4, seed=deadline_h):
            floor = run(get_policy("optimal"), window, setting)
            assert floor.deadline_met
            assert floor.cost_usd == pytest.approx(
                solve(window, setting, keep_choices=False).cost_usd
            )
            for name in ("on-demand", "greedy", "uniform-progress", "spothop"):
                online = run(get_policy(name), window, setting)
                assert floor.cost_usd <= online.cost_usd + 1e-9, (name, window.label)
