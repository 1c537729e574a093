"""``uniform-progress``: the Can't Be Late paper's rule — stay on the line of uniform progress."""

from __future__ import annotations

from spothop.scheduler.policies.base import (
    EPS_S,
    IDLE,
    ON_DEMAND,
    DeadlineState,
    Decision,
    Kind,
    Policy,
    register,
)


@register
class UniformProgressPolicy(Policy):
    """Idle while ahead of uniform progress, pay on-demand while behind it (NSDI'24).

    Why: greedy spends all its slack at the first long outage and then has to
    finish on on-demand; Uniform Progress spends slack in proportion to time,
    so it falls back to on-demand only while it is behind the straight line
    from (0, 0) to (D, task) and returns to spot once it is ahead of that line
    by two restarts. Rules (SIMULATION.md), c0 the task, ct the work left:
    default SPOT if available else NONE; behind (c0−ct < t·c0/D) → SPOT if
    available else ON_DEMAND; on ON_DEMAND stay unless spot is available and
    (t+2d)·c0/D − (c0−ct) < 0; then need2 ≥ left with NONE/ON_DEMAND last →
    ON_DEMAND; need1 ≥ left → SPOT only if it runs with no pending overhead.
    Example (52 h deadline): spot for 10 h, a 3 h outage: idle for ~50 min
    until behind the line, on-demand until spot returns and the job is 2d
    ahead again, then spot.
    """

    name = "uniform-progress"

    def decide(self, state: DeadlineState) -> Decision:
        c0, ct, t, d = state.task_s, state.work_left_s, state.elapsed_s, state.restart_overhead_s
        deadline = state.deadline_s
        zone = state.best_available_zone()
        spot = None if zone is None else Decision(Kind.SPOT, zone)
        done = c0 - ct
        if state.last.kind is Kind.ON_DEMAND:
            ahead_by_two = (t + 2 * d) * c0 / deadline - done < 0
            decision = spot if spot is not None and ahead_by_two else ON_DEMAND
        elif done < t * c0 / deadline:
            decision = spot or ON_DEMAND
        else:
            decision = spot or IDLE
        left = state.ticks_left()
        if state.ticks_needed(2) >= left and state.last.kind in (Kind.NONE, Kind.ON_DEMAND):
            decision = ON_DEMAND
        if state.ticks_needed(1) >= left:
            keep = state.last.kind is Kind.SPOT and state.pending_overhead_s <= EPS_S
            decision = Decision(Kind.SPOT, state.last.zone) if keep else ON_DEMAND
        return decision
