"""The resource model: GPU models, offerings and prices in one unit system."""

from spothop.resources.catalog import (
    Catalog,
    LoadResult,
    OfferQuery,
    load_catalog,
    read_catalog_path,
)
from spothop.resources.currency import RateTable, load_rates
from spothop.resources.gpus import GpuModel, gpu_catalog, match_gpus, resolve_gpu
from spothop.resources.market_id import MarketId
from spothop.resources.offering import DEFAULT_EFFICIENCY, Interconnect, Offering

__all__ = [
    "DEFAULT_EFFICIENCY",
    "Catalog",
    "GpuModel",
    "Interconnect",
    "LoadResult",
    "MarketId",
    "OfferQuery",
    "Offering",
    "RateTable",
    "gpu_catalog",
    "load_catalog",
    "load_rates",
    "match_gpus",
    "read_catalog_path",
    "resolve_gpu",
]
