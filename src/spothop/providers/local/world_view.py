"""The world at one instant: every simulated cloud's markets and storms, as data that serialises itself.

``spothop cloud world`` prints a :class:`WorldView`; ``--json`` prints its
:meth:`WorldView.to_dict`, so the command builds no rows of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from spothop.providers.local.provider import LocalProvider
from spothop.providers.local.runtime import stored_market_start
from spothop.providers.local.world import World


@dataclass(frozen=True)
class MarketView:
    """One market of one simulated cloud: its notice, where, what, and its prices now."""

    provider: str
    protocol: str
    notice_lead_time_s: float
    advance_notice_s: float | None
    region: str
    zone: str | None
    instance_type: str
    gpu: str | None  # "8x H100-SXM5-80GB"
    available: bool
    spot_usd_per_hour: float
    on_demand_usd_per_hour: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class StormView:
    """One scheduled crunch (``storms:``): whose markets, when, and where it stands now.

    ``state``: ``ahead``, ``raging`` or ``over``, on the cloud's markets' clock
    (before the first launch every storm is ahead: the markets start then).
    """

    cloud: str
    locations: tuple[str, ...] | None  # None: every location of the cloud
    instance_types: tuple[str, ...] | None  # None: every type
    at_s: float  # simulated seconds after the markets' start
    duration_s: float
    markets: int
    state: str

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("locations", "instance_types"):
            out[key] = None if out[key] is None else list(out[key])
        return out


@dataclass(frozen=True)
class WorldView:
    origin: str
    seed: int
    speed: float
    clouds: int
    markets: tuple[MarketView, ...]
    storms: tuple[StormView, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "seed": self.seed,
            "speed": self.speed,
            "clouds": self.clouds,
            "markets": [m.to_dict() for m in self.markets],
            "storms": [s.to_dict() for s in self.storms],
        }


def world_view(world: World, providers: Mapping[str, LocalProvider]) -> WorldView:
    """Every market of ``providers`` (one per cloud of ``world``) as its provider prices it now."""
    markets = []
    for name, provider in providers.items():
        spec = world.cloud(name)
        for price in provider.spot_prices():
            offering = world.offering(name, price.zone or price.region, price.instance_type)
            markets.append(
                MarketView(
                    provider=name,
                    protocol=spec.protocol,
                    notice_lead_time_s=spec.notice_lead_time_s,
                    advance_notice_s=spec.advance_notice_s,
                    region=price.region,
                    zone=price.zone,
                    instance_type=price.instance_type,
                    gpu=f"{offering.gpu_count}x {offering.gpu}" if offering else None,
                    available=price.available,
                    spot_usd_per_hour=price.price_usd_per_hour,
                    on_demand_usd_per_hour=offering.on_demand_price_usd_per_hour
                    if offering
                    else None,
                )
            )
    return WorldView(
        origin=world.origin,
        seed=world.seed,
        speed=world.speed,
        clouds=len(world.cloud_names),
        markets=tuple(markets),
        storms=_storms(world, next(iter(providers.values()), None)),
    )


def _storms(world: World, provider: LocalProvider | None) -> tuple[StormView, ...]:
    start = stored_market_start(provider.store) if provider is not None else None
    elapsed = None if start is None or provider is None else provider.clock.now() - start
    views = []
    for storm in world.spec.storms:
        end = storm.at_s + storm.duration_s
        state = (
            "ahead"
            if elapsed is None or elapsed < storm.at_s
            else ("raging" if elapsed < end else "over")
        )
        views.append(
            StormView(
                cloud=storm.cloud,
                locations=tuple(storm.locations) if storm.locations else None,
                instance_types=tuple(storm.instance_types) if storm.instance_types else None,
                at_s=storm.at_s,
                duration_s=storm.duration_s,
                markets=sum(
                    storm.takes(world.market_key(storm.cloud, o), o.location)
                    for o in world.offerings[storm.cloud]
                ),
                state=state,
            )
        )
    return tuple(views)
