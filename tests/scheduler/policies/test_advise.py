"""advise(): what a controller gets from a policy — through the safety rule, spot only where it is."""

from __future__ import annotations

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

H = 3600.0


def _state(work_left_h: float, elapsed_h: float, last: Decision, available: bool) -> DeadlineState:
    return DeadlineState(
        elapsed_s=elapsed_h * H,
        work_left_s=work_left_h * H,
        task_s=48 * H,
        deadline_s=52 * H,
        restart_overhead_s=0.05 * H,
        tick_s=600.0,
        last=last,
        pending_overhead_s=0.0,
        zones=(ZoneView(available, 0.9731),),
        on_demand_price_usd_per_hour=3.06,
    )


def test_with_slack_to_spare_greedy_waits_for_spot() -> None:
    assert advise(get_policy("greedy"), _state(40, 5, IDLE, available=False)) == IDLE
    assert advise(get_policy("greedy"), _state(40, 5, IDLE, available=True)) == Decision(Kind.SPOT)


def test_without_slack_the_safety_rule_goes_on_demand_but_keeps_running_spot() -> None:
    tight = _state(10, 42, IDLE, available=True)  # 10 h + a restart in 10 h: no room left
    assert advise(get_policy("greedy"), tight) == ON_DEMAND
    running = _state(10, 42, Decision(Kind.SPOT), available=True)
    assert advise(get_policy("spothop"), running) == Decision(Kind.SPOT)
    vanished = _state(10, 42, Decision(Kind.SPOT), available=False)
    assert advise(get_policy("greedy"), vanished) == IDLE  # kept spot, but it is gone
