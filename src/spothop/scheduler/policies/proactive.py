"""``spothop-proactive``: ``spothop``, plus a move make-before-break away from a zone whose risk rises.

The rule (issue 17, proactive migration): every :data:`RISK_WINDOW_S` of the job
each zone's risk — the odds that spot there is preempted within an hour, from
the zone's per-tick preemption odds — goes into the market layer's
:class:`~spothop.market.risk.RiskMonitor`. While the zone running spot is in a
run of rising risk (the monitor fired: three windows of rising risk in a row,
and no window since that did not rise), the job still has at least
:data:`LONG_TO_RUN_S` of work left, and another zone is up, the policy weighs a
make-before-break move to the calmest such zone:

    saving  = (p_here − p_there) · ticks of work left · d · on-demand price
              + (price_here − price_there) · hours of work left
    overlap = price_there · tick          (the new instance billed while it boots)

and moves only when ``saving > overlap``. A preemption avoided is valued at one
restart overhead ``d`` of lost work, made up at worst on on-demand. The move's
:class:`~spothop.scheduler.policies.base.Decision` records ``overlap_cost_usd``
and ``expected_saving_usd``. Anything else is ``spothop``'s decision unchanged.
Example: spot in zone a whose hourly risk went 0.05, 0.09, 0.14, 0.20 over the
last four 6 h windows, zone b at 0.02 and the same price, 40 h of work left,
d = 0.1 h: saving ≈ 0.03·240·0.1·3.06 ≈ $2.2 > overlap ≈ $0.16 → move.
"""

from __future__ import annotations

import math

from spothop.market.risk import RiskMonitor
from spothop.resources.market_id import MarketId
from spothop.scheduler.policies.base import DeadlineState, Decision, Kind, Policy, register
from spothop.scheduler.policies.spothop import SpothopPolicy

RISK_WINDOW_S = 6 * 3600.0  # the simulator's estimates are recounted every 6 h: one window each
LONG_TO_RUN_S = 4 * 3600.0  # below this much work left a move rarely pays back its overlap


def _hourly_risk(odds_per_tick: float, tick_s: float) -> float:
    """Odds of at least one preemption within an hour, from per-tick odds."""
    return 1.0 - float((1.0 - odds_per_tick) ** (3600.0 / tick_s))


def _market(zone: int) -> MarketId:
    return MarketId("simulated", "", f"zone-{zone}", "spot")


@register
class ProactivePolicy(Policy):
    """``spothop`` that leaves a zone turning worse before it preempts (module docstring).

    Why: a preemption costs a restart and, if no zone is up, slack; when a
    zone's risk has risen for three windows in a row it is likely to keep
    preempting, and a make-before-break move to a calmer zone costs only the
    overlap tick. The expected-saving test keeps it from moving for nothing.
    """

    name = "spothop-proactive"
    uses_estimates = True

    def __init__(self) -> None:
        self._inner = SpothopPolicy()
        self._monitor = RiskMonitor()
        self._last_risk: dict[int, float] = {}
        self._rising: set[int] = set()
        self._next_window_s = 0.0

    @property
    def rising_zones(self) -> frozenset[int]:
        """The zones in a run of rising risk now (indices into ``state.zones``)."""
        return frozenset(self._rising)

    def _observe(self, state: DeadlineState) -> None:
        """Feed each zone's risk once per window; keep which zones are in a run of rises."""
        if state.elapsed_s + 1e-6 < self._next_window_s:
            return
        self._next_window_s = state.elapsed_s + RISK_WINDOW_S
        for i, zone in enumerate(state.zones):
            if zone.preemption_odds_per_tick is None:
                continue
            risk = _hourly_risk(zone.preemption_odds_per_tick, state.tick_s)
            previous = self._last_risk.get(i)
            self._last_risk[i] = risk
            if self._monitor.observe(_market(i), state.elapsed_s, risk) is not None:
                self._rising.add(i)
            elif previous is not None and risk - previous <= self._monitor.min_rise:
                self._rising.discard(i)

    def move(self, state: DeadlineState) -> Decision | None:
        """The make-before-break move the rule makes now, or None (module docstring)."""
        here = state.last.zone
        if not state.spot_running or here not in self._rising:
            return None
        if state.work_left_s < LONG_TO_RUN_S or state.restart_overhead_s > state.tick_s:
            return None
        p_here = state.zones[here].preemption_odds_per_tick
        if p_here is None:
            return None
        best: Decision | None = None
        ticks_left = math.ceil(state.work_left_s / state.tick_s)
        hours_left = state.work_left_s / 3600.0
        per_preemption = state.restart_overhead_s / 3600.0 * state.on_demand_price_usd_per_hour
        for i, zone in enumerate(state.zones):
            p = zone.preemption_odds_per_tick
            if i == here or not zone.available or p is None or p >= p_here:
                continue
            saving = (p_here - p) * ticks_left * per_preemption + (
                state.zones[here].price_usd_per_hour - zone.price_usd_per_hour
            ) * hours_left
            overlap = zone.price_usd_per_hour * state.tick_s / 3600.0
            if saving > overlap and (best is None or saving > best.expected_saving_usd):
                best = Decision(
                    Kind.SPOT,
                    i,
                    make_before_break=True,
                    overlap_cost_usd=overlap,
                    expected_saving_usd=saving,
                )
        return best

    def decide(self, state: DeadlineState) -> Decision:
        self._observe(state)
        decision = self._inner.decide(state)
        if decision.kind is Kind.SPOT and decision.zone == state.last.zone:
            moved = self.move(state)
            if moved is not None:
                return moved
        return decision
