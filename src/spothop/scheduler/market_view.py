"""The market as the scheduler sees it at one moment: :class:`MarketView`.

A view is plain data — the catalog's offerings, each market's live state
(spot price now, capacity, preemption rate λ, reliability score) and each
provider's boot time — so ranking over it is pure and repeatable: the same
view and the same job give the same candidates, in a test, in the controller
and in ``spothop simulate``.

:func:`gather_market_view` is the one function in the scheduler that does
I/O: it asks each provider for its offerings and spot prices and the
:class:`~spothop.market.reliability.ReliabilityBook` for λ. Everything else
reads a view.

Rules:

- ``markets`` is keyed by :class:`MarketId`; an offering with no entry is
  judged on its catalog spot price, as available, with λ from the book's prior
  (or :data:`DEFAULT_PREEMPTION_RATE_PER_H` when no book was given).
- A spot price reported per region (zone ``None``) is the price of every zone
  of that region that has no zone price of its own.
- ``boot_s`` is per provider; a provider without an entry boots in
  :data:`DEFAULT_BOOT_S`.
- :meth:`MarketView.table` turns the offerings into columns (numpy arrays)
  once per view, so ranking 100,000 offerings does not touch 100,000 models.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from spothop.market.reliability import DEFAULT_PRIOR_RATE_PER_H, REFERENCE_RUN_H
from spothop.resources.market_id import MarketId
from spothop.resources.offering import Offering
from spothop.scheduler.requirements import INTERCONNECT_RANK

if TYPE_CHECKING:
    from spothop.market.reliability import ReliabilityBook
    from spothop.providers.base import Provider, SpotPrice

# Launch call to the agent's first heartbeat on a GPU image: 1-3 minutes on the
# large clouds (SkyPilot and dstack both budget ~2 min); the middle of that range.
DEFAULT_BOOT_S = 120.0
DEFAULT_PREEMPTION_RATE_PER_H = DEFAULT_PRIOR_RATE_PER_H
DEFAULT_AVAILABILITY = 1.0  # a market nobody reported on is tried, not ruled out


class MarketKind(StrEnum):
    """How an instance is bought: spot, on-demand, or from a reserved pool the user owns."""

    SPOT = "spot"
    ON_DEMAND = "on-demand"
    RESERVED = "reserved"


@dataclass(frozen=True)
class MarketState:
    """One spot market's live state.

    ``spot_price_usd_per_hour`` ``None``: no live price (the catalog's is used).
    ``available`` ``False``: the cloud says there is no capacity now.
    ``reliability_score`` is the market layer's ``A·exp(−λ·H)``;
    ``mean_outage_s`` the mean time it took capacity to come back, when known.
    """

    market: MarketId
    spot_price_usd_per_hour: float | None = None
    available: bool = True
    preemption_rate_per_h: float = DEFAULT_PREEMPTION_RATE_PER_H
    reliability_score: float | None = None
    mean_outage_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.market.to_dict(),
            "spot_price_usd_per_hour": self.spot_price_usd_per_hour,
            "available": self.available,
            "preemption_rate_per_h": self.preemption_rate_per_h,
            "reliability_score": self.reliability_score,
            "mean_outage_s": self.mean_outage_s,
        }


@dataclass(frozen=True)
class OfferingTable:
    """The view's offerings as columns, row ``i`` being ``offerings[i]``.

    Rows are in market order — by provider, region, zone, instance type (the
    same market listed twice keeps the order it came in) — not the view's.

    String columns are integer codes into the matching ``*_names`` tuple
    (sorted, so codes order like the names). Prices with no value are NaN.
    """

    offerings: tuple[Offering, ...]
    provider: np.ndarray
    provider_names: tuple[str, ...]
    region: np.ndarray
    region_names: tuple[str, ...]
    zone: np.ndarray  # code into zone_names; "" (regional) is a name like any other
    zone_names: tuple[str, ...]
    gpu: np.ndarray
    gpu_names: tuple[str, ...]
    instance_type: np.ndarray
    instance_type_names: tuple[str, ...]
    place: np.ndarray  # code into place_names: (provider, region), where data moves from and to
    place_names: tuple[tuple[str, str], ...]
    gpu_count: np.ndarray
    vcpus: np.ndarray
    memory_gib: np.ndarray
    gpu_memory_gib: np.ndarray
    effective_tflops_per_gpu: np.ndarray
    nominal_tflops_per_gpu: np.ndarray
    interconnect_rank: np.ndarray
    on_demand_price_usd_per_hour: np.ndarray
    spot_price_usd_per_hour: np.ndarray  # live where known, else the catalog's
    spot_available: np.ndarray  # bool
    preemption_rate_per_h: np.ndarray
    reliability_score: np.ndarray
    boot_s: np.ndarray

    def __len__(self) -> int:
        return len(self.offerings)


def _codes(values: Sequence[str]) -> tuple[np.ndarray, tuple[str, ...]]:
    names = sorted(set(values))
    index = {name: i for i, name in enumerate(names)}
    return np.fromiter((index[v] for v in values), dtype=np.int32, count=len(values)), tuple(names)


@dataclass(frozen=True)
class MarketView:
    """Offerings × live markets × boot times at ``now`` (unix seconds). Plain data; see the module rules."""

    now: float
    offerings: tuple[Offering, ...]
    markets: Mapping[MarketId, MarketState] = field(default_factory=dict)
    boot_s: Mapping[str, float] = field(default_factory=dict)
    default_preemption_rate_per_h: float = DEFAULT_PREEMPTION_RATE_PER_H

    def __post_init__(self) -> None:
        object.__setattr__(self, "offerings", tuple(self.offerings))

    def state_of(self, market: MarketId) -> MarketState:
        """The market's live state, or the defaults the rules give a market nobody reported on."""
        known = self.markets.get(market)
        if known is not None:
            return known
        return MarketState(market, preemption_rate_per_h=self.default_preemption_rate_per_h)

    def boot_s_of(self, provider: str) -> float:
        return float(self.boot_s.get(provider, DEFAULT_BOOT_S))

    @cached_property
    def table(self) -> OfferingTable:
        """The offerings as columns (built on first use, then kept with the view)."""
        n = len(self.offerings)
        provider, provider_names = _codes([o.provider for o in self.offerings])
        region, region_names = _codes([o.region for o in self.offerings])
        zone, zone_names = _codes([o.zone or "" for o in self.offerings])
        itype, itype_names = _codes([o.instance_type for o in self.offerings])
        # Rows in market order (codes order like names): a stable sort by score then breaks
        # ties the same way whatever order the providers listed their offerings in.
        perm = np.lexsort((itype, zone, region, provider))
        offers = tuple(self.offerings[i] for i in perm)
        provider, region, zone, itype = provider[perm], region[perm], zone[perm], itype[perm]
        gpu, gpu_names = _codes([o.gpu for o in offers])
        place_pairs = sorted({(o.provider, o.region) for o in offers})
        place_index = {pair: i for i, pair in enumerate(place_pairs)}
        place = np.fromiter(
            (place_index[(o.provider, o.region)] for o in offers), dtype=np.int32, count=n
        )
        # Per-GPU facts come from the GPU model: look each model up once, not once per row.
        facts: dict[tuple[str, float | None], tuple[float, float, float]] = {}
        memory = np.empty(n)
        tflops = np.empty(n)
        nominal = np.empty(n)
        for i, o in enumerate(offers):
            key = (o.gpu, o.measured_tflops_per_gpu)
            known = facts.get(key)
            if known is None:
                known = facts[key] = (
                    o.gpu_memory_gib,
                    o.effective_tflops_per_gpu,
                    o.nominal_tflops_per_gpu,
                )
            memory[i], tflops[i], nominal[i] = known
        on_demand = np.fromiter(
            (
                math.nan
                if o.on_demand_price_usd_per_hour is None
                else o.on_demand_price_usd_per_hour
                for o in offers
            ),
            dtype=float,
            count=n,
        )
        spot = np.empty(n)
        available = np.empty(n, dtype=bool)
        rate = np.empty(n)
        score = np.full(n, math.nan)  # NaN: no score reported, derived from λ below
        # Keyed by plain tuples: hashing a tuple of four strings is cheaper than making a MarketId.
        by_key = {
            (m.provider, m.region, m.zone, m.instance_type): state
            for m, state in self.markets.items()
        }
        default_rate = self.default_preemption_rate_per_h
        for i, o in enumerate(offers):
            state = by_key.get((o.provider, o.region, o.zone or "", o.instance_type))
            catalog = o.spot_price_usd_per_hour
            if state is None:
                spot[i] = math.nan if catalog is None else catalog
                available[i] = True
                rate[i] = default_rate
                continue
            live = state.spot_price_usd_per_hour
            price = live if live is not None else catalog
            spot[i] = math.nan if price is None else price
            available[i] = state.available
            rate[i] = state.preemption_rate_per_h
            if state.reliability_score is not None:
                score[i] = state.reliability_score
        derived = np.clip(DEFAULT_AVAILABILITY * np.exp(-rate * REFERENCE_RUN_H), 0.0, 1.0)
        score = np.where(np.isnan(score), derived, score)
        boot = np.array([self.boot_s_of(name) for name in provider_names], dtype=float)
        return OfferingTable(
            offerings=offers,
            provider=provider,
            provider_names=provider_names,
            region=region,
            region_names=region_names,
            zone=zone,
            zone_names=zone_names,
            gpu=gpu,
            gpu_names=gpu_names,
            instance_type=itype,
            instance_type_names=itype_names,
            place=place,
            place_names=tuple(place_pairs),
            gpu_count=np.fromiter((o.gpu_count for o in offers), dtype=np.int32, count=n),
            vcpus=np.fromiter((o.vcpus for o in offers), dtype=float, count=n),
            memory_gib=np.fromiter((o.memory_gib for o in offers), dtype=float, count=n),
            gpu_memory_gib=memory,
            effective_tflops_per_gpu=tflops,
            nominal_tflops_per_gpu=nominal,
            interconnect_rank=np.fromiter(
                (INTERCONNECT_RANK[o.interconnect] for o in offers), dtype=np.int8, count=n
            ),
            on_demand_price_usd_per_hour=on_demand,
            spot_price_usd_per_hour=spot,
            spot_available=available,
            preemption_rate_per_h=rate,
            reliability_score=score,
            boot_s=boot[provider] if n else np.empty(0),
        )


def gather_market_view(
    providers: Iterable[Provider],
    reliability: ReliabilityBook | Callable[[float], ReliabilityBook | None] | None = None,
    now: float | None = None,
    boot_s: Mapping[str, float] | None = None,
) -> MarketView:
    """Ask each provider for its offerings and spot prices, and the book for λ: the one I/O here.

    ``now`` defaults to the newest spot price's timestamp (the providers'
    clock, which a simulated cloud runs faster than the wall), else 0.
    A zone's own spot price wins over its region's. λ and the score come from
    ``reliability`` — a book, or a callable given ``now`` that returns one (the
    book of the window ending at the providers' time) — using its prior for
    markets it never saw; without one, the defaults.
    """
    offerings: list[Offering] = []
    zonal: dict[MarketId, SpotPrice] = {}
    regional: dict[tuple[str, str, str], SpotPrice] = {}
    newest = 0.0
    for provider in providers:
        offerings.extend(provider.list_offerings())
        for price in provider.spot_prices():
            newest = max(newest, price.timestamp)
            if price.zone is None:
                regional[(price.provider, price.region, price.instance_type)] = price
            else:
                market = MarketId.of(price.provider, price.region, price.zone, price.instance_type)
                zonal[market] = price
    when = newest if now is None else now
    book = reliability(when) if callable(reliability) else reliability
    markets: dict[MarketId, MarketState] = {}
    for offer in offerings:
        market = offer.market_id
        live = zonal.get(market) or regional.get(
            (offer.provider, offer.region, offer.instance_type)
        )
        known = book.get(market) if book is not None else None
        markets[market] = MarketState(
            market=market,
            spot_price_usd_per_hour=None if live is None else live.price_usd_per_hour,
            available=True if live is None else live.available,
            preemption_rate_per_h=book.preemption_rate_per_h(market, offer.gpu)
            if book is not None
            else DEFAULT_PREEMPTION_RATE_PER_H,
            reliability_score=known.score if known is not None else None,
            mean_outage_s=known.mean_time_to_regain_s if known is not None else None,
        )
    return MarketView(
        now=when, offerings=tuple(offerings), markets=markets, boot_s=dict(boot_s or {})
    )
