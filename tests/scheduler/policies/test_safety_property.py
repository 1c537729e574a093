"""The safety rule holds whatever the trace does: no online policy misses a deadline it could meet.

A deadline can be met when on-demand from the first tick meets it (⌈(task+d)/gap⌉
≤ ⌊D/gap⌋). For every such job — random availability, tick length, restart
overhead (shorter and longer than a tick), task and slack — ``spothop`` finishes
by the deadline on one zone and on several, and so do the published baselines
on one zone (the published Uniform Progress does not leave room for a move
between zones, which is a restart: docs/simulate.md).
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spothop.scheduler.policies import get_policy
from spothop.scheduler.policies.spothop import SpothopPolicy
from spothop.scheduler.simulate import JobSetting, Window, run, zone_from_flags

OURS = ("spothop", "spothop-proactive")
PUBLISHED = ("uniform-progress", "greedy")


@st.composite
def jobs(draw: st.DrawFn, most_zones: int = 3) -> tuple[Window, JobSetting]:
    tick_s = float(draw(st.sampled_from([60, 300, 600, 3600])))
    task_ticks = draw(st.integers(1, 40))
    overhead_s = draw(st.sampled_from([0.0, 0.02, 0.1, 0.5, 1.0, 1.7])) * tick_s
    need = math.ceil((task_ticks * tick_s + overhead_s) / tick_s - 1e-9)
    deadline_ticks = need + draw(st.integers(0, 30))
    zones = draw(st.integers(1, most_zones))
    length = deadline_ticks + need + 4
    up_odds = draw(st.floats(0.0, 1.0))
    traces = []
    for i in range(zones):
        flags = draw(
            st.lists(
                st.booleans() if up_odds > 0.5 else st.sampled_from([False, False, True]),
                min_size=length,
                max_size=length,
            )
        )
        traces.append(zone_from_flags(f"z{i}", flags, tick_s))
    setting = JobSetting(
        task_s=task_ticks * tick_s,
        deadline_s=deadline_ticks * tick_s,
        restart_overhead_s=overhead_s,
    )
    return Window(tuple(traces), 0), setting


def _meets(policy: str, job: tuple[Window, JobSetting]) -> None:
    window, setting = job
    result = run(get_policy(policy), window, setting)
    assert result.deadline_met, (policy, window.label, setting, result.finish_h)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs(), st.sampled_from(OURS))
def test_spothop_never_misses_a_deadline_it_could_meet(
    job: tuple[Window, JobSetting], policy: str
) -> None:
    _meets(policy, job)


@settings(max_examples=100, deadline=None)
@given(jobs(most_zones=1), st.sampled_from(PUBLISHED))
def test_nor_do_the_published_baselines_on_one_zone(
    job: tuple[Window, JobSetting], policy: str
) -> None:
    _meets(policy, job)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs(), st.floats(1.0, 4.0))
def test_whatever_restart_weight_spothop_plans_with_the_deadline_holds(
    job: tuple[Window, JobSetting], weight: float
) -> None:
    """The restart weight only changes what the plan charges a switch; the deadline is the safety
    rule's and the room-for-one-more-restart rule's, which count the true overhead."""
    window, setting = job
    result = run(SpothopPolicy(restart_weight=weight), window, setting)
    assert result.deadline_met, (weight, window.label, setting, result.finish_h)
