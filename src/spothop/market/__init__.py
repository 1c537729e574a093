"""Market intelligence: trace and price-history readers, synthetic markets, the spot simulator.

Public API (everything else is private)::

    Clock, WallClock, ManualClock, SimClock, SimClockSpec        time, real or simulated
    AvailabilityTrace, TraceKind                                 instances obtainable per tick
    read_trace, read_cant_be_late, read_bamboo_events, read_bamboo_counts
    PricePoint, PriceProblem, PriceImport, PriceSeries
    read_price_file, price_sources, detect_price_source          any registered format (market/sources/)
    SyntheticMarketParams, SyntheticMarket, generate_market, derive_seed
    MarketSource, SpotMarket                                     markets keyed by MarketId
    TraceError                                                   (a ConfigError)

    Price history, forecasts, reliability (issue 5)::

    MarketId (from spothop.resources), PriceSeriesKey, PriceStore, ImportReport, AddResult, StoredPrice
    PriceForecast, forecast_price, backtest_series, summarise, HORIZONS_H
    Interruption, InterruptionStore, record_interruption, reliability_from_store,
    mean_time_between_preemptions_s
    MarketEvidence, ProviderSignals, AdvisorBucket, Reliability, ReliabilityBook
    evidence_from_trace, evidence_from_traces, trace_market
    RiskMonitor, RisingRiskEvent, risk_windows, rising_risk_events
"""

from spothop.market.availability import AvailabilityTrace, TraceKind
from spothop.market.clock import Clock, ManualClock, SimClock, SimClockSpec, WallClock
from spothop.market.errors import TraceError
from spothop.market.forecast import (
    HORIZONS_H,
    PriceForecast,
    backtest_series,
    forecast_price,
    summarise,
)
from spothop.market.identity import PriceSeriesKey
from spothop.market.interruptions import (
    Interruption,
    InterruptionStore,
    mean_time_between_preemptions_s,
    record_interruption,
    reliability_from_store,
)
from spothop.market.price_history import (
    PriceImport,
    PricePoint,
    PriceProblem,
    PriceSeries,
)
from spothop.market.price_import import PriceRecord, read_price_file
from spothop.market.price_store import AddResult, ImportReport, PriceStore, StoredPrice
from spothop.market.reliability import (
    AdvisorBucket,
    MarketEvidence,
    ProviderSignals,
    Reliability,
    ReliabilityBook,
    evidence_from_trace,
)
from spothop.market.risk import RisingRiskEvent, RiskMonitor, rising_risk_events, risk_windows
from spothop.market.simulator import MarketSource, SpotMarket
from spothop.market.sources import detect_price_source, price_sources
from spothop.market.synthetic import (
    SyntheticMarket,
    SyntheticMarketParams,
    derive_seed,
    generate_market,
)
from spothop.market.trace_markets import evidence_from_traces, trace_market
from spothop.market.traces import (
    CountLog,
    CountSample,
    NodeEvent,
    NodeEventLog,
    detect_kind,
    read_bamboo_counts,
    read_bamboo_events,
    read_cant_be_late,
    read_trace,
)
from spothop.resources.market_id import MarketId

__all__ = [
    "HORIZONS_H",
    "AddResult",
    "AdvisorBucket",
    "AvailabilityTrace",
    "Clock",
    "CountLog",
    "CountSample",
    "ImportReport",
    "Interruption",
    "InterruptionStore",
    "ManualClock",
    "MarketEvidence",
    "MarketId",
    "MarketSource",
    "NodeEvent",
    "NodeEventLog",
    "PriceForecast",
    "PriceImport",
    "PricePoint",
    "PriceProblem",
    "PriceRecord",
    "PriceSeries",
    "PriceSeriesKey",
    "PriceStore",
    "ProviderSignals",
    "Reliability",
    "ReliabilityBook",
    "RisingRiskEvent",
    "RiskMonitor",
    "SimClock",
    "SimClockSpec",
    "SpotMarket",
    "StoredPrice",
    "SyntheticMarket",
    "SyntheticMarketParams",
    "TraceError",
    "TraceKind",
    "WallClock",
    "backtest_series",
    "derive_seed",
    "detect_kind",
    "detect_price_source",
    "evidence_from_trace",
    "evidence_from_traces",
    "forecast_price",
    "generate_market",
    "mean_time_between_preemptions_s",
    "price_sources",
    "read_bamboo_counts",
    "read_bamboo_events",
    "read_cant_be_late",
    "read_price_file",
    "read_trace",
    "record_interruption",
    "reliability_from_store",
    "rising_risk_events",
    "risk_windows",
    "summarise",
    "trace_market",
]
