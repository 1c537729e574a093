"""spothop-proactive: a make-before-break move away from a zone whose risk rises, when it pays.

The hand-built market (600 s ticks, a week of history before the job): zone b
drops for a tick every 30 ticks throughout; zone a dropped as often during the
week, then, from the job's start, ever more often (every 30 ticks, 29, … down
to every 5), so its risk rises window after window and the market layer's
monitor fires. Spot in a is cheaper, so spothop keeps coming back to it.
"""

from __future__ import annotations

from spothop.scheduler.policies import get_policy
from spothop.scheduler.policies.proactive import ProactivePolicy
from spothop.scheduler.simulate import JobSetting, run, zone_from_flags
from spothop.scheduler.simulate.model import RunResult, Window

H = 3600.0
TICK_S = 600.0
WEEK = 1008  # ticks of history before the job
TICKS = WEEK + 600
SETTING = JobSetting(task_s=40 * H, deadline_s=48 * H, restart_overhead_s=0.15 * H)


def _market(price_b_usd_per_hour: float, worsening: bool = True) -> Window:
    a = [True] * TICKS
    b = [t % 30 != 15 for t in range(TICKS)]
    for t in range(WEEK):
        a[t] = t % 30 != 0
    for t in range(WEEK, TICKS):
        gap = max(5, 30 - (t - WEEK) // 5) if worsening else 30
        a[t] = (t - WEEK) % gap != 0
    zone_a = zone_from_flags("a", a, TICK_S, [0.9731] * TICKS)
    zone_b = zone_from_flags("b", b, TICK_S, [price_b_usd_per_hour] * TICKS)
    return Window((zone_a, zone_b), start_tick=WEEK)


def _run(window: Window) -> tuple[ProactivePolicy, RunResult]:
    policy = get_policy("spothop-proactive")
    assert isinstance(policy, ProactivePolicy)
    return policy, run(policy, window, SETTING, record=True)


def test_moves_make_before_break_when_the_saving_covers_the_overlap() -> None:
    policy, result = _run(_market(price_b_usd_per_hour=0.98))
    assert 0 in policy.rising_zones  # the monitor fired for zone a
    moves = [r for r in result.ticks if r.decision.make_before_break]
    assert moves and result.migrations == len(moves)
    for record in moves:
        decision = record.decision
        assert decision.zone == 1
        assert decision.expected_saving_usd > decision.overlap_cost_usd > 0
        # the overlap is what the decision said: both zones billed for the tick
        assert abs(decision.overlap_cost_usd - 0.98 * TICK_S / H) < 1e-9
    assert result.deadline_met
    plain = run(get_policy("spothop"), _market(0.98), SETTING)
    assert result.preemptions < plain.preemptions


def test_stays_when_the_calmer_zone_costs_more_than_the_risk_saves() -> None:
    policy, result = _run(_market(price_b_usd_per_hour=1.5))
    assert 0 in policy.rising_zones  # the same rising risk ...
    assert result.migrations == 0  # ... but b's price eats the saving: no move
    plain = run(get_policy("spothop"), _market(1.5), SETTING)
    assert result.cost_usd == plain.cost_usd and result.deadline_met


def test_no_rising_risk_no_move() -> None:
    policy, result = _run(_market(price_b_usd_per_hour=1.0, worsening=False))
    assert 0 not in policy.rising_zones
    assert result.migrations == 0
