"""The spothop deadline policy: cheaper than Uniform Progress on real windows, every deadline met."""

from __future__ import annotations

import pytest

from spothop.scheduler.policies import get_policy
from spothop.scheduler.simulate import JobSetting, run, zone_from_flags
from spothop.scheduler.simulate.model import Window
from spothop.scheduler.simulate.traces import load_zone, windows
from tests.conftest import shared_path

H = 3600.0


@pytest.mark.parametrize(("deadline_h", "overhead_h"), [(52, 0.05), (70, 0.1)])
def test_spothop_costs_less_than_uniform_progress_and_meets_every_deadline(
    deadline_h: int, overhead_h: float
) -> None:
    folder = shared_path("traces", "cant-be-late", "availability-1node-aws-2022-10-26")
    setting = JobSetting(deadline_s=deadline_h * H, restart_overhead_s=overhead_h * H)
    totals = {"spothop": 0.0, "uniform-progress": 0.0}
    for name in ("us-west-2a_v100_8.json", "us-west-2b_k80_8.json"):
        for window in windows([load_zone(folder / name)], setting, count=8, seed=5):
            for policy in totals:
                result = run(get_policy(policy), window, setting)
                assert result.deadline_met, (policy, window.label)
                totals[policy] += result.cost_usd
    assert totals["spothop"] < totals["uniform-progress"]


def test_spothop_decides_like_uniform_progress_before_the_market_has_a_history() -> None:
    flags = [True, True, False, False, True, True, True, True]
    setting = JobSetting(task_s=4 * H, deadline_s=6 * H, restart_overhead_s=0.5 * H)
    window = Window((zone_from_flags("z", flags, H),), 0)
    ours = run(get_policy("spothop"), window, setting, record=True)
    theirs = run(get_policy("uniform-progress"), window, setting, record=True)
    assert [r.decision for r in ours.ticks[:3]] == [r.decision for r in theirs.ticks[:3]]


def test_spothop_moves_to_the_zone_that_is_up_and_meets_the_deadline() -> None:
    folder = shared_path("traces", "cant-be-late", "availability-1node-aws-2022-10-26")
    zones = [
        load_zone(folder / "us-west-2a_v100_1.json"),
        load_zone(folder / "us-west-2b_v100_1.json"),
    ]
    setting = JobSetting(deadline_s=52 * H, restart_overhead_s=0.05 * H)
    for window in windows(zones, setting, count=4, seed=2):
        multi = run(get_policy("spothop"), window, setting)
        assert multi.deadline_met
        assert multi.cost_usd <= run(get_policy("on-demand"), window, setting).cost_usd
