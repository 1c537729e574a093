"""The decision layer: where to run a job, ranked by the expected cost of useful work.

Public API (imported on first use, so ``from spothop.scheduler import Requirements``
stays light)::

    Requirements, FILTERS                       what a job needs (requirements.py)
    MarketKind, MarketState, MarketView         the market at one moment (market_view.py)
    gather_market_view                          the one function here that does I/O
    goodput, auto_interval_s                    the share of paid time that is kept (goodput.py)
    EgressTable, egress_table                   per-provider egress prices, dated (egress.py)
    WorkProfile, ReservedPool, Candidate, Ranking, rank
                                                scoring and ranking (placement.py)
    spread                                      zones and types for several workers (spread.py)
    NoCandidates, NoCapacityNow                 an empty ranking, explained (errors.py)

The layer sits above resources/, market/ and providers/ and below jobs/: it
never imports jobs/. See docs/placement.md.
"""

from spothop._lazy import lazy_exports

_LAZY = {
    "Requirements": "spothop.scheduler.requirements",
    "FILTERS": "spothop.scheduler.requirements",
    "MarketKind": "spothop.scheduler.market_view",
    "MarketState": "spothop.scheduler.market_view",
    "MarketView": "spothop.scheduler.market_view",
    "gather_market_view": "spothop.scheduler.market_view",
    "goodput": "spothop.scheduler.goodput",
    "auto_interval_s": "spothop.scheduler.goodput",
    "EgressTable": "spothop.scheduler.egress",
    "egress_table": "spothop.scheduler.egress",
    "WorkProfile": "spothop.scheduler.placement",
    "ReservedPool": "spothop.scheduler.placement",
    "Candidate": "spothop.scheduler.placement",
    "Ranking": "spothop.scheduler.placement",
    "rank": "spothop.scheduler.placement",
    "NoCandidates": "spothop.scheduler.errors",
    "NoCapacityNow": "spothop.scheduler.errors",
    "spread": "spothop.scheduler.spread",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
