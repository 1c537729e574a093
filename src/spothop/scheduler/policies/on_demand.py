"""``on-demand``: never use spot. The upper bound every saving is measured from."""

from __future__ import annotations

from spothop.scheduler.policies.base import ON_DEMAND, DeadlineState, Decision, Policy, register


@register
class OnDemandPolicy(Policy):
    """Run on-demand from the first tick to the last.

    Why: it is what a job without spothop pays, and it can never miss a
    deadline that is reachable at all. Example (48 h task, 0.02 h overhead,
    600 s ticks): tick 0 pays the 72 s launch and credits 528 s, ticks 1–288
    credit 600 s each; 289 ticks at $3.06/h cost $147.39.
    """

    name = "on-demand"

    def decide(self, state: DeadlineState) -> Decision:
        return ON_DEMAND
