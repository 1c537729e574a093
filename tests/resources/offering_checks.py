"""What every offering a parser hands out must satisfy, whatever file it came from."""

from __future__ import annotations

import math

from spothop.bounds import (
    INSTANCE_GPU_COUNT,
    MEMORY_GIB,
    PRICE_USD_PER_HOUR,
    VCPUS,
    YEAR_FIRST,
    YEAR_LAST,
)
from spothop.resources.catalog import format_catalog_csv, read_catalog_text
from spothop.resources.currency import RateTable
from spothop.resources.offering import Offering


def assert_valid_offering(offering: Offering, rates: RateTable) -> None:
    """Names present, numbers finite and in their bounds, and the offering survives a save and a load."""
    assert offering.provider.strip() and offering.region.strip() and offering.instance_type.strip()
    assert INSTANCE_GPU_COUNT.low <= offering.gpu_count <= INSTANCE_GPU_COUNT.high
    assert 0 < offering.vcpus <= VCPUS.high and 0 < offering.memory_gib <= MEMORY_GIB.high
    prices = [
        p
        for p in (offering.on_demand_price_usd_per_hour, offering.spot_price_usd_per_hour)
        if p is not None
    ]
    assert prices and all(math.isfinite(p) and 0 < p <= PRICE_USD_PER_HOUR.high for p in prices)
    assert YEAR_FIRST <= offering.price_date.year <= YEAR_LAST
    back = read_catalog_text(format_catalog_csv([offering]), "saved.csv", rates)
    assert not back.errors, back.errors
    assert [o.market_id for o in back.offerings] == [offering.market_id]
