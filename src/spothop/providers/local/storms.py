"""Storms: scheduled capacity crunches, played on top of every market's own weather.

A world's ``storms:`` list says when a cloud's spot capacity runs out, as a
sold-out region or a provider-wide GPU shortage does::

    storms:
      - cloud: azure-sim
        at_s: 600                 # simulated seconds after the local cloud's markets start
        duration_s: 600           # how long its markets have no spot capacity
        locations: [eastus]       # optional: these locations only (default: all of the cloud's)
        instance_types: [...]     # optional: these types only (default: all)

The markets start with the cloud's first launch (:func:`.runtime.market_start`),
so a storm falls at the same point of every run that starts on a fresh cloud
however fast the machine runs it. While a storm lasts, its markets have no
capacity whatever their trace or generator says; outside it, they are
exactly what their trace or generator says (prices included: a storm takes
capacity, not price). An instance running in a market a storm takes is
reclaimed as any drop reclaims it: the cloud's advance signal where it has
one, its final notice ``notice_lead_time_s`` before the storm, then the kill
at the storm's start; a spot launch during it fails with the cloud's own
capacity error.

Contract of :class:`StormyMarket`: for a key without storms, every answer is
the underlying :class:`~spothop.market.SpotMarket`'s; with storms, ``available``
is 0 inside a window (``[start, start + duration)``) and the drop and
recovery times account for the windows, so the host's notice planning and
the provider's launch checks see the storms with no change of their own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from spothop.bounds import DURATION_S, Bound
from spothop.market import MarketSource, SpotMarket
from spothop.resources.market_id import MarketId

STORM_DURATION_S = Bound(
    0, 30 * 86400, "s", low_open=True
)  # a crunch of more than a month is a typo

Window = tuple[float, float]  # [start, end) in simulated unix seconds


class StormSpec(BaseModel):
    """One scheduled crunch of one cloud's spot capacity (all its markets, or some)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cloud: str
    at_s: Annotated[float, DURATION_S.annotated("at_s")] = Field(
        description="when it starts: simulated seconds after the cloud's markets start (its first launch)"
    )
    duration_s: Annotated[float, STORM_DURATION_S.annotated("duration_s")]
    locations: list[str] | None = Field(
        default=None, min_length=1, description="default: every location of the cloud"
    )
    instance_types: list[str] | None = Field(
        default=None, min_length=1, description="default: every instance type of the cloud"
    )

    def takes(self, key: MarketId, location: str) -> bool:
        """Whether this storm takes the market ``key`` (``location``: its zone or region)."""
        return (
            key.provider == self.cloud
            and (self.locations is None or location in self.locations)
            and (self.instance_types is None or key.instance_type in self.instance_types)
        )


class StormyMarket(SpotMarket):
    """A :class:`SpotMarket` whose markets also lose all capacity in their storm windows.

    ``storms`` maps a market to its windows, in seconds after ``sim_start``.
    """

    def __init__(
        self,
        sources: Mapping[MarketId, MarketSource],
        sim_start: float,
        seed: int = 0,
        storms: Mapping[MarketId, Sequence[Window]] | None = None,
    ) -> None:
        super().__init__(sources, sim_start=sim_start, seed=seed)
        self._windows: dict[MarketId, list[Window]] = {
            key: sorted((sim_start + a, sim_start + b) for a, b in windows)
            for key, windows in (storms or {}).items()
            if key in sources and windows
        }

    def storm_windows(self, key: MarketId) -> list[Window]:
        """The market's storms, in simulated unix seconds, earliest first."""
        return list(self._windows.get(key, ()))

    def _storm_at(self, key: MarketId, t: float) -> Window | None:
        return next((w for w in self._windows.get(key, ()) if w[0] <= t < w[1]), None)

    def available(self, key: MarketId, t: float) -> int:
        base = super().available(key, t)
        return 0 if self._storm_at(key, t) is not None else base

    def next_available_after(self, key: MarketId, t: float, need: int = 1) -> float | None:
        while True:
            storm = self._storm_at(key, t)
            if storm is not None:
                t = storm[1]
            back = super().next_available_after(key, t, need)
            if back is None or self._storm_at(key, back) is None:
                return back
            t = back

    def next_preemption_after(self, key: MarketId, t: float, need: int = 1) -> float | None:
        if not self._windows.get(key):
            return super().next_preemption_after(key, t, need)
        if not self.is_available(key, t, need):
            back = self.next_available_after(key, t, need)
            if back is None:
                return None
            t = back
        # Available at t: the first of the market's own drop and the next storm's start. Until the
        # own drop the market is up, so a storm starting before it is a drop; the own drop cannot
        # fall inside a storm that starts after t and before it.
        drop = super().next_preemption_after(key, t, need)
        storm = next((a for a, _ in self._windows[key] if a > t), None)
        if storm is not None and (drop is None or storm <= drop):
            return storm
        return drop
