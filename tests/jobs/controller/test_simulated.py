"""The bridge: decide on a virtual clock equals scheduler/simulate's model, tick by tick.

A job with a deadline driven by the controller's own ``decide``
(jobs/controller/simulated.py) costs, finishes and decides exactly what the
tick model does, for greedy, uniform-progress and spothop (which reads how long
spot has been up or down: the controller's spot runs): on hand-built traces, on
windows of the shared 2022 traces in the published setting (both deadlines,
the three overheads), and with several zones. A run that differs is named with
the first tick where the decisions part.
"""

from __future__ import annotations

import numpy as np
import pytest

from spothop.jobs.controller import Launch, RequestStop
from spothop.jobs.controller.simulated import simulate_job
from spothop.scheduler.policies import get_policy
from spothop.scheduler.simulate import JobSetting, Window, run, zone_from_flags
from spothop.scheduler.simulate.traces import load_zone, windows
from tests.conftest import shared_path

H = 3600.0
POLICIES = ["greedy", "uniform-progress", "spothop"]
SINGLE = ("us-west-2a_v100_1.json", "us-west-2b_v100_1.json")


def _flaky_zone(seed: int, ticks: int, p_down: float) -> Window:
    rng = np.random.default_rng(seed)
    return Window((zone_from_flags(f"z{seed}", (rng.random(ticks) > p_down).tolist(), 600.0),))


def _assert_same(policy: str, window: Window, setting: JobSetting) -> None:
    model = run(get_policy(policy), window, setting, record=True)
    bridge = simulate_job(policy, window, setting, record=True).result
    name = (
        f"{policy} on {window.label} (deadline {setting.deadline_s / H:g} h, overhead "
        f"{setting.restart_overhead_s / H:g} h)"
    )
    for m, b in zip(model.ticks, bridge.ticks, strict=False):
        assert m == b, f"{name}: first differs at tick {m.tick}: model {m}, controller {b}"
    assert len(model.ticks) == len(bridge.ticks), f"{name}: the runs end at different ticks"
    assert bridge.to_dict() == model.to_dict(), name


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
def test_spot_that_vanishes_once_the_work_is_done_preempts_nothing(policy: str) -> None:
    """The work ends in tick 6; spot goes at 7: the model's run has ended, so the controller's
    instance (its worker exiting 0 at that boundary) is no preemption either."""
    flags = [True] * 7 + [False] * 200
    setting = JobSetting(task_s=1 * H, deadline_s=3 * H, restart_overhead_s=0.05 * H)
    window = Window((zone_from_flags("ends", flags, 600.0),))
    _assert_same(policy, window, setting)
    assert run(get_policy(policy), window, setting).preemptions == 0


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("deadline_h", [52, 70])
def test_shared_traces_in_the_published_setting(policy: str, deadline_h: int) -> None:
    """2 traces × 2 windows × the 3 overheads, per policy and deadline: every run equal."""
    folder = shared_path("traces", "cant-be-late", "availability-1node-aws-2022-10-26")
    for overhead_h in (0.02, 0.05, 0.1):
        setting = JobSetting(deadline_s=deadline_h * H, restart_overhead_s=overhead_h * H)
        for name in SINGLE:
            for window in windows([load_zone(folder / name)], setting, count=2, seed=deadline_h):
                _assert_same(policy, window, setting)


@pytest.mark.parametrize("policy", POLICIES)
def test_several_zones_the_same_way(policy: str) -> None:
    """Three AWS zones (spothop reads "spot somewhere": the union's runs, and breaks a price tie
    on each zone's odds of a drop, λ in the controller) and three GCP zones (a shorter job)."""
    aws = shared_path("traces", "cant-be-late", "preemption-4node-aws-2023-08-03")
    gcp = shared_path("traces", "spothedge-gcp-a100")
    for folder, scale in ((aws, 1.0), (gcp, 0.25)):
        zones = [load_zone(p) for p in sorted(folder.glob("*.json"))][:3]
        setting = JobSetting(task_s=48 * H * scale, deadline_s=52 * H * scale)
        for window in windows(zones, setting, count=1, seed=1):
            _assert_same(policy, window, setting)


def test_spothop_stops_on_demand_to_wait_as_the_model_does() -> None:
    """The policy waits out an outage after on-demand: the controller asks the instance to stop
    (the model's NONE), and relaunches later, tick for tick the model's run."""
    folder = shared_path("traces", "cant-be-late", "availability-1node-aws-2022-10-26")
    window = Window((load_zone(folder / "us-west-2a_v100_1.json"),), 3457)
    setting = JobSetting(restart_overhead_s=0.02 * H)
    _assert_same("spothop", window, setting)
    bridged = simulate_job("spothop", window, setting, record=True)
    stops = [a for tick in bridged.actions for a in tick if isinstance(a, RequestStop)]
    assert stops and all("stopped to wait: deadline policy spothop" in a.reason for a in stops)


def test_the_bridge_records_decides_actions() -> None:
    setting = JobSetting(task_s=10 * H, deadline_s=14 * H, restart_overhead_s=0.05 * H)
    bridged = simulate_job("greedy", _flaky_zone(3, 200, 0.2), setting, record=True)
    launched = [a for tick in bridged.actions for a in tick if isinstance(a, Launch)]
    assert len(launched) == bridged.result.restarts
    assert all("deadline policy greedy" in a.reason for a in launched)
