"""Rising risk: a market whose risk score rose in three consecutive windows raises an event.

Risk is ``1 − score`` (:mod:`spothop.market.reliability`). A :class:`RiskMonitor`
keeps each market's last risks; when the latest :data:`RISES_TO_ALERT` steps
each rose by more than :data:`MIN_RISE` it builds a :class:`RisingRiskEvent`,
hands it to every subscribed listener (the controller, to migrate before the
market turns), and returns it. It fires once per run of rises: after firing a
market must see a window that did not rise before it can fire again, so a
market that keeps worsening does not flood the listeners. Example risks
0.20, 0.25, 0.31, 0.40 → fires at 0.40; a further 0.45 does not fire again.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from spothop.market.availability import AvailabilityTrace
from spothop.market.reliability import WINDOW_S, MarketEvidence, Prior, assess, evidence_from_trace
from spothop.resources.market_id import MarketId

RISES_TO_ALERT = 3  # issue 5: risk rose in three consecutive windows
MIN_RISE = 0.005  # a rise smaller than half a point of risk is noise, not a trend


@dataclass(frozen=True)
class RisingRiskEvent:
    """``market``'s risk rose in each of the last windows; ``risks`` oldest first, ``at`` the last window's end."""

    market: MarketId
    at: float
    risks: tuple[float, ...]

    @property
    def risk(self) -> float:
        return self.risks[-1]


Listener = Callable[[RisingRiskEvent], None]


class RiskMonitor:
    """Feed it each market's risk per window (:meth:`observe`); listeners hear of rising risk."""

    def __init__(self, rises: int = RISES_TO_ALERT, min_rise: float = MIN_RISE) -> None:
        self.rises = rises
        self.min_rise = min_rise
        self._listeners: list[Listener] = []
        self._history: dict[MarketId, list[float]] = {}
        self._fired: set[MarketId] = set()

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def observe(self, market: MarketId, at: float, risk: float) -> RisingRiskEvent | None:
        """Record one window's risk (windows in time order); the event if this completes a run of rises."""
        history = self._history.setdefault(market, [])
        history.append(risk)
        del history[: -(self.rises + 1)]  # only the last rises+1 values matter
        if len(history) >= 2 and history[-1] - history[-2] <= self.min_rise:
            self._fired.discard(market)  # the run is broken: the market may fire again later
            return None
        rising = len(history) == self.rises + 1 and all(
            b - a > self.min_rise for a, b in itertools.pairwise(history)
        )
        if not rising or market in self._fired:
            return None
        self._fired.add(market)
        event = RisingRiskEvent(market, at, tuple(history))
        for listener in self._listeners:
            listener(event)
        return event


def risk_windows(
    trace: AvailabilityTrace,
    market: MarketId,
    gpu: str,
    prior: Prior,
    step_s: float = 86400.0,
    window_s: float = WINDOW_S,
) -> list[tuple[float, float]]:
    """``(window end offset s, risk)`` for windows of ``window_s`` ending every ``step_s`` along a trace."""
    step = max(1, round(step_s / trace.tick_s))
    out = []
    for end in range(step, len(trace) + 1, step):
        evidence: MarketEvidence = evidence_from_trace(trace, market, gpu, window_s, end_tick=end)
        out.append((end * trace.tick_s, assess(evidence, prior).risk))
    return out


def rising_risk_events(
    market: MarketId, risks: Sequence[tuple[float, float]], monitor: RiskMonitor | None = None
) -> list[RisingRiskEvent]:
    """Replay ``(at, risk)`` windows through a monitor; every event it raised."""
    monitor = monitor or RiskMonitor()
    return [e for at, risk in risks if (e := monitor.observe(market, at, risk)) is not None]
