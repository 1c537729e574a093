"""``greedy``: spot whenever it is there, idle otherwise, on-demand only when the deadline forces it."""

from __future__ import annotations

from spothop.scheduler.policies.base import (
    IDLE,
    ON_DEMAND,
    DeadlineState,
    Decision,
    Kind,
    Policy,
    register,
)


@register
class GreedyPolicy(Policy):
    """Use spot when available, wait when not, fall back to on-demand at the last moment.

    Why: it spends no money while spot is away, so it wins when spot comes back
    soon; it loses when the slack is gone, because then the rest of the job
    runs on on-demand even if spot returns (switching back would cost a
    restart it can no longer afford). Rules (SIMULATION.md), in ticks, with
    left = ⌊(D−t)/gap⌋, need1 = ⌈(W+d)/gap⌉, need2 = ⌈(W+2d)/gap⌉:
    need1 ≥ left → ON_DEMAND; need2 ≥ left → keep SPOT if it runs and is
    available, else ON_DEMAND; else SPOT if available, else NONE.
    Example (52 h deadline, 48 h task): spot, spot, ·gone· idle … idle for
    ~4 h until need2 ≥ left, then on-demand to the end.
    """

    name = "greedy"

    def decide(self, state: DeadlineState) -> Decision:
        left = state.ticks_left()
        if state.ticks_needed(1) >= left:
            return ON_DEMAND
        if state.ticks_needed(2) >= left:
            if state.last.kind is Kind.SPOT and state.spot_running:
                return Decision(Kind.SPOT, state.last.zone)
            return ON_DEMAND
        zone = state.best_available_zone()
        return IDLE if zone is None else Decision(Kind.SPOT, zone)
