"""The world at one instant: every simulated cloud's markets, as data that serialises itself.

``spothop cloud world`` prints a :class:`WorldView`; ``--json`` prints its
:meth:`WorldView.to_dict`, so the command builds no rows of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from spothop.providers.local.provider import LocalProvider
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
class WorldView:
    origin: str
    seed: int
    speed: float
    clouds: int
    markets: tuple[MarketView, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "seed": self.seed,
            "speed": self.speed,
            "clouds": self.clouds,
            "markets": [m.to_dict() for m in self.markets],
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
    )
