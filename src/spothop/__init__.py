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
]
