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

from __future__ import annotations

from typing import TYPE_CHECKING

from spothop._lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers and editors see; at run time each comes from _LAZY
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

# name → the module it is imported from on first use: ``spothop.market.clock`` (the local
# cloud's instance host, every CLI command) then loads without the price store's SQLAlchemy
# tables, the forecasts and the trace readers.
_LAZY: dict[str, str] = {
    **dict.fromkeys(("AvailabilityTrace", "TraceKind"), "spothop.market.availability"),
    **dict.fromkeys(
        ("Clock", "ManualClock", "SimClock", "SimClockSpec", "WallClock"), "spothop.market.clock"
    ),
    "TraceError": "spothop.market.errors",
    **dict.fromkeys(
        ("HORIZONS_H", "PriceForecast", "backtest_series", "forecast_price", "summarise"),
        "spothop.market.forecast",
    ),
    "PriceSeriesKey": "spothop.market.identity",
    **dict.fromkeys(
        (
            "Interruption",
            "InterruptionStore",
            "mean_time_between_preemptions_s",
            "record_interruption",
            "reliability_from_store",
        ),
        "spothop.market.interruptions",
    ),
    **dict.fromkeys(
        ("PriceImport", "PricePoint", "PriceProblem", "PriceSeries"), "spothop.market.price_history"
    ),
    **dict.fromkeys(("PriceRecord", "read_price_file"), "spothop.market.price_import"),
    **dict.fromkeys(
        ("AddResult", "ImportReport", "PriceStore", "StoredPrice"), "spothop.market.price_store"
    ),
    **dict.fromkeys(
        (
            "AdvisorBucket",
            "MarketEvidence",
            "ProviderSignals",
            "Reliability",
            "ReliabilityBook",
            "evidence_from_trace",
        ),
        "spothop.market.reliability",
    ),
    **dict.fromkeys(
        ("RisingRiskEvent", "RiskMonitor", "rising_risk_events", "risk_windows"),
        "spothop.market.risk",
    ),
    **dict.fromkeys(("MarketSource", "SpotMarket"), "spothop.market.simulator"),
    **dict.fromkeys(("detect_price_source", "price_sources"), "spothop.market.sources"),
    **dict.fromkeys(
        ("SyntheticMarket", "SyntheticMarketParams", "derive_seed", "generate_market"),
        "spothop.market.synthetic",
    ),
    **dict.fromkeys(("evidence_from_traces", "trace_market"), "spothop.market.trace_markets"),
    **dict.fromkeys(
        (
            "CountLog",
            "CountSample",
            "NodeEvent",
            "NodeEventLog",
            "detect_kind",
            "read_bamboo_counts",
            "read_bamboo_events",
            "read_cant_be_late",
            "read_trace",
        ),
        "spothop.market.traces",
    ),
    "MarketId": "spothop.resources.market_id",
}
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

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
