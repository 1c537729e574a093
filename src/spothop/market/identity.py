"""One price series: a market (:class:`~spothop.resources.market_id.MarketId`), spot or on-demand, a product.

Names are kept exactly as the cloud spells them; a regional market's zone is
``""`` (the convention is explained in :mod:`spothop.resources.market_id`).
"""

from __future__ import annotations

from dataclasses import dataclass

from spothop.resources.market_id import MarketId

SPOT = "spot"
ON_DEMAND = "on-demand"


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
