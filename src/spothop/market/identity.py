"""Names of markets: where a spot instance of one type can be had, and one price series.

Names are kept exactly as the cloud spells them. ``zone`` is ``""`` when the
cloud prices or reports a whole region alike (Azure low-priority, most GCP
prices); :func:`aws_region_of_zone` recovers a region from an AWS zone name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SPOT = "spot"
ON_DEMAND = "on-demand"

# us-east-1a → us-east-1; us-west-2-lax-1a (a Local Zone) → us-west-2
_AWS_ZONE = re.compile(r"^([a-z]{2}(?:-gov)?-[a-z]+-\d+)")


def aws_region_of_zone(zone: str) -> str:
    """The AWS region an availability-zone name belongs to (the name itself if it is none)."""
    match = _AWS_ZONE.match(zone)
    return match.group(1) if match else zone


@dataclass(frozen=True, order=True)
class MarketId:
    """One place to rent one instance type: provider, region, zone (or ``""``), type."""

    provider: str
    region: str
    zone: str
    instance_type: str

    @property
    def location(self) -> str:
        return self.zone or self.region

    @property
    def slug(self) -> str:
        return f"{self.provider}/{self.location}/{self.instance_type}"


@dataclass(frozen=True, order=True)
class PriceSeriesKey:
    """One price series: a market, spot or on-demand, and the product (OS) priced.

    ``product`` is the cloud's own label (AWS ``"Linux/UNIX"``), ``""`` if none.
    """

    market: MarketId
    spot: bool = True
    product: str = ""

    @property
    def market_kind(self) -> str:
        return SPOT if self.spot else ON_DEMAND

    @property
    def slug(self) -> str:
        product = f" [{self.product}]" if self.product else ""
        return f"{self.market.slug} {self.market_kind}{product}"
