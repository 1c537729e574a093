"""spothop: GPU batch work on the cheapest reliable spot capacity, across clouds.

The public surface is re-exported here; submodules are implementation.
"""

from spothop.errors import (
    AuthFailed,
    CapacityUnavailable,
    CatalogError,
    CatalogRowError,
    ConfigError,
    CurrencyError,
    InstanceNotFound,
    PriceTooLow,
    ProviderError,
    QuotaExceeded,
    RateLimited,
    SpothopError,
    TopologyParseError,
    UnknownGpuError,
)

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # ``@spothop.batch`` turns ``process(shard) -> output`` into a batch job's
    # worker. Imported on first use, so ``import spothop`` stays light (the
    # on-instance agent imports it and must not pull in pydantic or pyarrow).
    if name == "batch":
        import importlib

        return importlib.import_module("spothop.batch")
    raise AttributeError(f"module 'spothop' has no attribute {name!r}")

__all__ = [
    "AuthFailed",
    "CapacityUnavailable",
    "CatalogError",
    "CatalogRowError",
    "ConfigError",
    "CurrencyError",
    "InstanceNotFound",
    "PriceTooLow",
    "ProviderError",
    "QuotaExceeded",
    "RateLimited",
    "SpothopError",
    "TopologyParseError",
    "UnknownGpuError",
    "__version__",
    "batch",
]
