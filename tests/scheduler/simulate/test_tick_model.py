"""The tick model replays hand-computed sequences tick by tick (SIMULATION.md), and the published figures."""

from __future__ import annotations

import pytest

from spothop.scheduler.policies import IDLE, ON_DEMAND, Decision, Kind, Policy, get_policy
from spothop.scheduler.simulate import JobSetting, Window, run, zone_from_flags

H = 3600.0
SPOT = Decision(Kind.SPOT)
# 1 h ticks, a 4 h task, a 6 h deadline, 0.5 h restarts, spot $1/h, on-demand $3/h
SMALL = JobSetting(
    task_s=4 * H,
    deadline_s=6 * H,
    restart_overhead_s=0.5 * H,
    spot_price_usd_per_hour=1.0,
    on_demand_price_usd_per_hour=3.0,
)
# spot there for two ticks, gone for two, back for good
TRACE = [True, True, False, False, True, True, True, True]


def _window(flags: list[bool], tick_s: float = H, prices: list[float] | None = None) -> Window:
    return Window((zone_from_flags("z", flags, tick_s, prices),), 0)


def _sequence(result_ticks: tuple) -> list[tuple[str, float, float]]:  # type: ignore[type-arg]
    return [(r.decision.kind.label, r.credit_s / H, r.work_left_s / H) for r in result_ticks]


def test_greedy_waits_for_nothing_and_finishes_on_on_demand() -> None:
    result = run(get_policy("greedy"), _window(TRACE), SMALL, record=True)
    assert _sequence(result.ticks) == [
        ("spot", 0.5, 3.5),  # first launch pays the overhead
        ("spot", 1.0, 2.5),  # need2 = 5 ≥ left = 5: keeps the spot it runs
        ("on-demand", 0.5, 2.0),  # preempted; need2 = 4 ≥ left = 4 → on-demand, a restart
        ("on-demand", 1.0, 1.0),
        ("on-demand", 1.0, 0.0),
    ]
    assert result.cost_usd == pytest.approx(2 * 1.0 + 3 * 3.0)
    assert result.finish_h == pytest.approx(5.0)
    assert (result.preemptions, result.restarts) == (1, 2)
    assert (result.spot_hours, result.on_demand_hours) == (2.0, 3.0)
    assert result.deadline_met


def test_uniform_progress_idles_while_ahead_and_pays_while_behind() -> None:
    result = run(get_policy("uniform-progress"), _window(TRACE), SMALL, record=True)
    assert _sequence(result.ticks) == [
        ("spot", 0.5, 3.5),
        ("spot", 1.0, 2.5),
        ("none", 0.0, 2.5),  # preempted, 1.5 done ≥ 2·4/6: ahead of the line, so wait
        ("on-demand", 0.5, 2.0),  # 1.5 < 3·4/6: behind → on-demand
        ("on-demand", 1.0, 1.0),  # spot is back, but not 2d ahead: stays on on-demand
        ("on-demand", 1.0, 0.0),
    ]
    assert result.cost_usd == pytest.approx(11.0)
    assert result.finish_h == pytest.approx(6.0)
    assert result.deadline_met


class Scripted(Policy):
    """Plays a fixed sequence of decisions, with no safety rule (the tick rules alone)."""

    name = "scripted"
    online = False

    def __init__(self, decisions: list[Decision]) -> None:
        self.decisions = decisions

    def decide(self, state):  # type: ignore[no-untyped-def]
        return self.decisions[round(state.elapsed_s / state.tick_s)]


def test_an_overhead_longer_than_a_tick_spills_and_a_switch_resets_it() -> None:
    setting = JobSetting(
        task_s=3 * H,
        deadline_s=10 * H,
        restart_overhead_s=1.5 * H,
        spot_price_usd_per_hour=1.0,
        on_demand_price_usd_per_hour=3.0,
    )
    script = [SPOT, SPOT, ON_DEMAND, ON_DEMAND, ON_DEMAND, IDLE, SPOT, SPOT, SPOT, SPOT]
    result = run(Scripted(script), _window([True] * 10), setting, record=True)
    assert _sequence(result.ticks) == [
        ("spot", 0.0, 3.0),  # 1.5 h of overhead: all of tick 0 ...
        ("spot", 0.5, 2.5),  # ... and half of tick 1
        ("on-demand", 0.0, 2.5),  # a switch sets (not adds) the overhead again
        ("on-demand", 0.5, 2.0),
        ("on-demand", 1.0, 1.0),
        ("none", 0.0, 1.0),  # idle: nothing credited, nothing billed
        ("spot", 0.0, 1.0),  # relaunch after idling pays again
        ("spot", 0.5, 0.5),
        ("spot", 0.5, 0.0),  # the last tick is billed in full though half was needed
    ]
    assert result.cost_usd == pytest.approx(5 * 1.0 + 3 * 3.0)
    assert result.finish_h == pytest.approx(8.5)


def test_spot_asked_for_where_it_is_gone_is_idle_and_a_preemption_keeps_the_tick_before() -> None:
    script = [SPOT, SPOT, SPOT, SPOT, SPOT, SPOT, SPOT, SPOT]
    result = run(Scripted(script), _window(TRACE), SMALL, record=True)
    kinds = [r.decision.kind.label for r in result.ticks]
    assert kinds == ["spot", "spot", "none", "none", "spot", "spot", "spot"]
    assert result.ticks[1].credit_s == H  # the tick before the preemption counts in full
    assert result.preemptions == 1
    assert result.finish_h == pytest.approx(7.0)  # 1.5 h done, 2 h idle, 0.5 + 1 + 1 h
    assert not result.deadline_met


def test_per_tick_prices_bill_each_tick_at_its_own_price() -> None:
    setting = JobSetting(task_s=2 * H, deadline_s=4 * H, restart_overhead_s=0.0)
    window = _window([True] * 4, prices=[0.5, 0.7, 9.0, 9.0])
    result = run(Scripted([SPOT, SPOT, SPOT, SPOT]), window, setting)
    assert result.cost_usd == pytest.approx(0.5 + 0.7)


def test_moving_to_another_zone_costs_a_restart() -> None:
    zones = (
        zone_from_flags("a", [True, False, False, False], H),
        zone_from_flags("b", [True, True, True, True], H),
    )
    setting = JobSetting(task_s=2 * H, deadline_s=4 * H, restart_overhead_s=0.5 * H)
    script = [Decision(Kind.SPOT, 0), Decision(Kind.SPOT, 1), Decision(Kind.SPOT, 1), IDLE]
    result = run(Scripted(script), Window(zones, 0), setting, record=True)
    assert [r.credit_s / H for r in result.ticks] == [0.5, 0.5, 1.0]
    assert (result.restarts, result.preemptions) == (2, 1)


def test_the_published_setting_figures() -> None:
    """On-demand from the start costs 147.39 (289 ticks); all spot with no overhead 46.71."""
    always = _window([True] * 400, tick_s=600.0)
    assert round(run(get_policy("on-demand"), always, JobSetting()).cost_usd, 2) == 147.39
    free = JobSetting(restart_overhead_s=0.0)
    assert round(run(get_policy("greedy"), always, free).cost_usd, 2) == 46.71


def test_make_before_break_keeps_the_old_zone_working_while_the_new_one_boots() -> None:
    zones = (
        zone_from_flags("a", [True] * 6, H, [1.0] * 6),
        zone_from_flags("b", [True, True, False, True, True, True], H, [0.5] * 6),
    )
    setting = JobSetting(task_s=4 * H, deadline_s=6 * H, restart_overhead_s=0.5 * H)
    a, b = Decision(Kind.SPOT, 0), Decision(Kind.SPOT, 1)
    move = Decision(Kind.SPOT, 1, make_before_break=True)
    # tick 2: b is down, so the move does not start and a goes on; tick 3: it does
    script = [a, a, move, move, b, b]
    result = run(Scripted(script), Window(zones, 0), setting, record=True)
    assert [(r.decision.zone, r.credit_s / H, r.cost_usd) for r in result.ticks] == [
        (0, 0.5, 1.0),
        (0, 1.0, 1.0),
        (0, 1.0, 1.0),  # b down: a stays, no move
        (1, 1.0, 1.5),  # a works the tick (credited in full) while b boots (billed too)
        (1, 0.5, 0.5),  # on b, nothing more to pay: the last half hour of work
    ]
    assert (result.migrations, result.restarts) == (1, 1)
