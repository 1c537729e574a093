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

    Price history, forecasts, reliability (issue 5)::

    MarketId, PriceSeriesKey, PriceStore, PriceFormat, ImportReport, AddResult, StoredPrice
    read_azure_low_priority_csv, detect_price_format
    PriceForecast, forecast_price, backtest_series, summarise, HORIZONS_H
    InterruptionStore, record_interruption, reliability_from_store, mean_time_between_preemptions_s
    MarketEvidence, ProviderSignals, AdvisorBucket, Reliability, ReliabilityBook
    evidence_from_trace, evidence_from_traces, trace_market
    RiskMonitor, RisingRiskEvent, risk_windows, rising_risk_events
"""

from spothop.market.availability import AvailabilityTrace, TraceKind
from spothop.market.azure_prices import read_azure_low_priority_csv
from spothop.market.clock import Clock, ManualClock, SimClock, SimClockSpec, WallClock
from spothop.market.errors import TraceError
from spothop.market.forecast import (
    HORIZONS_H,
    PriceForecast,
    backtest_series,
    forecast_price,
    summarise,
)
from spothop.market.identity import MarketId, PriceSeriesKey
from spothop.market.interruptions import (
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
    read_aws_price_history_csv,
    read_aws_price_history_json,
)
from spothop.market.price_import import PriceFormat, detect_price_format
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
from spothop.market.simulator import MarketKey, MarketSource, SpotMarket
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
    read_bamboo_events,
    read_bamboo_gcloud,
    read_cant_be_late,
    read_trace,
)

__all__ = [
    "HORIZONS_H",
    "AddResult",
    "AdvisorBucket",
    "AvailabilityTrace",
    "Clock",
    "CountLog",
    "CountSample",
    "ImportReport",
    "InterruptionStore",
    "ManualClock",
    "MarketEvidence",
    "MarketId",
    "MarketKey",
    "MarketSource",
    "NodeEvent",
    "NodeEventLog",
    "PriceForecast",
    "PriceFormat",
    "PriceImport",
    "PricePoint",
    "PriceProblem",
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
    "detect_price_format",
    "evidence_from_trace",
    "evidence_from_traces",
    "forecast_price",
    "generate_market",
    "mean_time_between_preemptions_s",
    "read_aws_price_history_csv",
    "read_aws_price_history_json",
    "read_azure_low_priority_csv",
    "read_bamboo_events",
    "read_bamboo_gcloud",
    "read_cant_be_late",
    "read_trace",
    "record_interruption",
    "reliability_from_store",
    "rising_risk_events",
    "risk_windows",
    "summarise",
    "trace_market",
]
