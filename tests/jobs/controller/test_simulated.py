"""The bridge: decide on a virtual clock equals scheduler/simulate's model, tick by tick.

With one zone, constant prices and SIMULATION.md's options, a job with a
deadline driven by the controller's own ``decide`` (jobs/controller/simulated.py)
costs, finishes and decides exactly what the tick model does, for greedy and
uniform-progress: on hand-built traces and on windows of the shared 2022 traces.
"""

from __future__ import annotations

import numpy as np
import pytest

from spothop.jobs.controller import Launch
from spothop.jobs.controller.simulated import simulate_job
from spothop.scheduler.policies import get_policy
from spothop.scheduler.simulate import JobSetting, Window, run, zone_from_flags
from spothop.scheduler.simulate.traces import load_zone, windows
from tests.conftest import shared_path

H = 3600.0
POLICIES = ["greedy", "uniform-progress"]


def _flaky_zone(seed: int, ticks: int, p_down: float) -> Window:
    rng = np.random.default_rng(seed)
    return Window((zone_from_flags(f"z{seed}", (rng.random(ticks) > p_down).tolist(), 600.0),))


def _assert_same(policy: str, window: Window, setting: JobSetting) -> None:
    model = run(get_policy(policy), window, setting, record=True)
    bridge = simulate_job(policy, window, setting, record=True).result
    for m, b in zip(model.ticks, bridge.ticks, strict=True):
        assert m == b, f"tick {m.tick}: model {m}, controller {b}"
    assert bridge.to_dict() == model.to_dict()


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("overhead_h", [0.02, 0.05, 0.1])
def test_hand_built_traces_tick_by_tick(policy: str, overhead_h: float) -> None:
    setting = JobSetting(task_s=20 * H, deadline_s=26 * H, restart_overhead_s=overhead_h * H)
    _assert_same(policy, _flaky_zone(1, 400, 0.3), setting)


@pytest.mark.parametrize("policy", POLICIES)
def test_long_outages_push_the_job_to_on_demand_the_same_way(policy: str) -> None:
    flags = ([True] * 30 + [False] * 60) * 6
    window = Window((zone_from_flags("outages", flags, 600.0),))
    setting = JobSetting(task_s=20 * H, deadline_s=24 * H, restart_overhead_s=0.05 * H)
    _assert_same(policy, window, setting)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("deadline_h", [52, 70])
def test_shared_traces_in_the_published_setting(policy: str, deadline_h: int) -> None:
    folder = shared_path("traces", "cant-be-late", "availability-1node-aws-2022-10-26")
    setting = JobSetting(deadline_s=deadline_h * H, restart_overhead_s=0.05 * H)
    zone = load_zone(folder / "us-west-2a_v100_1.json")
    for window in windows([zone], setting, count=2, seed=deadline_h):
        _assert_same(policy, window, setting)


def test_the_bridge_records_decides_actions() -> None:
    setting = JobSetting(task_s=10 * H, deadline_s=14 * H, restart_overhead_s=0.05 * H)
    bridged = simulate_job("greedy", _flaky_zone(3, 200, 0.2), setting, record=True)
    launched = [a for tick in bridged.actions for a in tick if isinstance(a, Launch)]
    assert len(launched) == bridged.result.restarts
    assert all("deadline policy greedy" in a.reason for a in launched)
