"""Market intelligence: trace and price-history readers, synthetic markets, the spot simulator.

Public API (everything else is private)::

    Clock, WallClock, ManualClock, SimClock, SimClockSpec        time, real or simulated
    AvailabilityTrace, TraceKind                                 instances obtainable per tick
    read_trace, read_cant_be_late, read_bamboo_events, read_bamboo_gcloud
    PricePoint, PriceProblem, PriceImport, PriceSeries
    read_aws_price_history_csv, read_aws_price_history_json
    SyntheticMarketParams, SyntheticMarket, generate_market, derive_seed
    MarketKey, MarketSource, SpotMarket
    TraceError                                                   (a ConfigError)
"""

from spothop.market.availability import AvailabilityTrace, TraceKind
from spothop.market.clock import Clock, ManualClock, SimClock, SimClockSpec, WallClock
from spothop.market.errors import TraceError
from spothop.market.price_history import (
    PriceImport,
    PricePoint,
    PriceProblem,
    PriceSeries,
    read_aws_price_history_csv,
    read_aws_price_history_json,
)
from spothop.market.simulator import MarketKey, MarketSource, SpotMarket
from spothop.market.synthetic import (
    SyntheticMarket,
    SyntheticMarketParams,
    derive_seed,
    generate_market,
)
from spothop.market.traces import (
    CountLog,
    CountSample,
    NodeEvent,
    NodeEventLog,
    detect_kind,
    read_bamboo_events,
    read_bamboo_gcloud,
    read_cant_be_late,
    read_trace,
)

__all__ = [
    "AvailabilityTrace",
    "Clock",
    "CountLog",
    "CountSample",
    "ManualClock",
    "MarketKey",
    "MarketSource",
    "NodeEvent",
    "NodeEventLog",
    "PriceImport",
    "PricePoint",
    "PriceProblem",
    "PriceSeries",
    "SimClock",
    "SimClockSpec",
    "SpotMarket",
    "SyntheticMarket",
    "SyntheticMarketParams",
    "TraceError",
    "TraceKind",
    "WallClock",
    "derive_seed",
    "detect_kind",
    "generate_market",
    "read_aws_price_history_csv",
    "read_aws_price_history_json",
    "read_bamboo_events",
    "read_bamboo_gcloud",
    "read_cant_be_late",
    "read_trace",
]
