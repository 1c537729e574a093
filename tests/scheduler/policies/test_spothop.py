"""The spothop deadline policy: cheaper than Uniform Progress on real windows, every deadline met."""

from __future__ import annotations

import numpy as np
import pytest

from spothop.scheduler.policies import (
    IDLE,
    ON_DEMAND,
    DeadlineState,
    Decision,
    Kind,
    ZoneView,
    advise,
    get_policy,
)
from spothop.scheduler.policies.spothop import (
    DEFAULT_PRIOR,
    SpothopPolicy,
    fit_prior,
    planned_overhead_s,
)
from spothop.scheduler.simulate import JobSetting, Window, run, zone_from_flags
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


def _state(elapsed_h: float, work_left_h: float, down_ticks: int, last: Decision) -> DeadlineState:
    zone = ZoneView(
        available=down_ticks == 0, price_usd_per_hour=0.9731, down_for_s=down_ticks * 600.0
    )
    return DeadlineState(
        elapsed_s=elapsed_h * H,
        work_left_s=work_left_h * H,
        task_s=48 * H,
        deadline_s=52 * H,
        restart_overhead_s=0.02 * H,
        tick_s=600.0,
        last=last,
        pending_overhead_s=0.0,
        zones=(zone,),
        on_demand_price_usd_per_hour=3.06,
    )


def test_a_fresh_outage_is_waited_out_and_an_old_one_is_paid_for_on_demand() -> None:
    """With 3 h of slack left, an outage one tick old most likely ends soon (a third end
    at once on the shared traces): wait; one eight ticks old will probably last hours."""
    policy = get_policy("spothop")
    spot = Decision(Kind.SPOT)
    assert advise(policy, _state(10, 39, 1, spot)) == IDLE
    assert advise(policy, _state(10, 39, 8, IDLE)) == ON_DEMAND
    assert advise(policy, _state(10, 39, 0, IDLE)) == spot


def test_back_from_on_demand_only_once_spot_has_stayed_up_when_slack_is_short() -> None:
    """Spot that has just come back is gone again after a tick half the time: with 1 h of
    slack and 0.1 h restarts the plan stays on on-demand until spot has been up for 80 min (an
    hour with a switch charged one restart, not the default weight); with 2 h, half an hour."""
    policy = get_policy("spothop")

    def state(up_ticks: int, work_left_h: float = 41) -> DeadlineState:
        zone = ZoneView(True, 0.9731, up_for_s=up_ticks * 600.0)
        return DeadlineState(
            10 * H, work_left_h * H, 48 * H, 52 * H, 0.1 * H, 600.0, ON_DEMAND, 0.0, (zone,), 3.06
        )

    spot = Decision(Kind.SPOT)
    assert [advise(policy, state(up)) for up in (1, 7, 8)] == [ON_DEMAND, ON_DEMAND, spot]
    assert [advise(policy, state(up, 40)) for up in (2, 3)] == [ON_DEMAND, spot]
    one = SpothopPolicy(restart_weight=1.0)
    assert [advise(one, state(up)) for up in (5, 6)] == [ON_DEMAND, spot]


def test_a_switch_is_charged_its_weight_in_restarts_only_while_a_restart_is_short() -> None:
    """Rule 5 in ticks: the full weight for a restart short against a tick, fading to one
    restart as the restart reaches a tick; the same at any tick length."""
    assert planned_overhead_s(0.0, 600.0, 2.0) == 0.0
    assert planned_overhead_s(60.0, 600.0, 2.0) == pytest.approx(60.0 * 1.9)
    assert planned_overhead_s(15.0, 150.0, 2.0) == pytest.approx(15.0 * 1.9)
    assert planned_overhead_s(360.0, 600.0, 2.0) == pytest.approx(360.0 * 1.4)
    assert planned_overhead_s(150.0, 150.0, 2.0) == 150.0
    assert planned_overhead_s(360.0, 150.0, 4.0) == 360.0
    assert planned_overhead_s(360.0, 600.0, 1.0) == 360.0


def test_spot_that_never_drops_is_taken_at_once_when_a_restart_spans_ticks() -> None:
    """GCP's 150 s ticks with 0.1 h restarts (2.4 ticks): spot up from the start is taken at
    once, not after a spell of on-demand (a weight charged as a plain multiple made the plan
    start on-demand and move: GCP europe-west4-a cost $16.12 a run instead of $15.69)."""
    tick, setting = 150.0, JobSetting(16 * H, 52 / 3 * H, 0.1 * H)
    zone = ZoneView(True, 0.9731, up_for_s=tick)
    state = DeadlineState(0.0, 16 * H, 16 * H, 52 / 3 * H, 0.1 * H, tick, IDLE, 0.0, (zone,), 3.06)
    assert advise(get_policy("spothop"), state) == Decision(Kind.SPOT, 0)
    always = zone_from_flags("up", np.ones(setting.horizon_ticks(tick) + 1, bool), tick)
    result = run(get_policy("spothop"), Window((always,), 0), setting)
    assert result.on_demand_hours == 0.0 and result.restarts == 1


def test_the_decision_is_a_function_of_the_state_alone() -> None:
    """A fresh policy per decision (as the controller makes one) decides as one kept for a run."""
    states = [_state(h, 48 - h * 0.8, d, IDLE) for h in (0, 5, 20) for d in (0, 1, 6)]
    kept = get_policy("spothop")
    first = [advise(kept, s) for s in states]
    assert [advise(get_policy("spothop"), s) for s in reversed(states)] == first[::-1]


def test_the_default_prior_is_the_one_fitted_on_the_shared_traces() -> None:
    folder = shared_path("traces", "cant-be-late", "availability-1node-aws-2022-10-26")
    fitted = fit_prior([load_zone(p).available for p in sorted(folder.glob("*.json"))])
    assert fitted.drop_odds_by_age == pytest.approx(DEFAULT_PRIOR.drop_odds_by_age, abs=1e-4)
    assert fitted.recovery_odds_by_age == pytest.approx(
        DEFAULT_PRIOR.recovery_odds_by_age, abs=1e-4
    )


def test_run_ages_are_counted_in_time_whatever_the_tick() -> None:
    """The prior's odds are per 10 min of age: at 5 min ticks an outage 20 min old (four ticks)
    has, over two ticks, the odds of the prior's 20 min age over one; the last age stands for
    80 min and older at every tick length."""
    prior = DEFAULT_PRIOR
    assert prior.at_tick(600.0)[1] == pytest.approx(prior.recovery_odds_by_age)
    drops, recovery = prior.at_tick(300.0)
    assert len(drops) == len(recovery) == 16
    both = 1 - (1 - recovery[3]) * (1 - recovery[4])
    assert both == pytest.approx(prior.recovery_odds_by_age[1])
    assert 1 - (1 - recovery[-1]) ** 2 == pytest.approx(prior.recovery_odds_by_age[-1])
    assert len(prior.at_tick(150.0)[0]) == 32 and len(prior.at_tick(3600.0)[0]) == 2


def test_fit_prior_counts_how_runs_of_each_age_end() -> None:
    up = np.array([1, 1, 0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], dtype=bool)
    prior = fit_prior([up])
    # up runs of 2, 2, 1 and a last one cut by the trace's end: age 1 ends 1 of 4, age 2 2 of 2
    assert prior.drop_odds_by_age[:2] == pytest.approx((1 / 4, 1.0))
    # outages of 1, 2 and 10 ticks: age 1 ends 1 of 3, age 2 ends 1 of 2, age 3 none of 1
    assert prior.recovery_odds_by_age[:3] == pytest.approx((1 / 3, 1 / 2, 0.0))
    # ages 8+: the 10-tick outage spends ages 8, 9 and 10 there, and ends once
    assert prior.recovery_odds_by_age[-1] == pytest.approx(1 / 3)


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
