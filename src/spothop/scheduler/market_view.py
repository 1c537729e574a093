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
- A spot price that cannot be true is taken as missing (:mod:`.price_checks`).
- ``boot_s`` is per provider; a provider without an entry boots in
  :data:`DEFAULT_BOOT_S`. :func:`gather_market_view` fills it from each
  provider's ``capabilities.typical_boot_s``.
- :meth:`MarketView.table` turns the offerings into columns (numpy arrays)
  once per view, so ranking 100,000 offerings does not touch 100,000 models.
  A :class:`ViewCache` keeps the columns of unchanged offerings between views;
  :func:`gather_market_view` then writes only prices, capacity and λ
  (:class:`LiveColumns`) and hands the view :class:`ColumnMarkets`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property
from itertools import repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from spothop.market.reliability import DEFAULT_PRIOR_RATE_PER_H, REFERENCE_RUN_H
from spothop.resources.market_id import MarketId
from spothop.resources.offering import Offering
from spothop.scheduler.price_checks import implausible_spot
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


MarketKey = tuple[str, str, str, str]  # provider, region, zone ("" regional), instance type


def _nan_or(value: float | None) -> float:
    return math.nan if value is None else value


@dataclass(frozen=True, eq=False)
class OfferingColumns:
    """What a view's table takes from its offerings alone: built once, kept while they last.

    Everything of :class:`OfferingTable` but the live columns (spot price,
    capacity, λ, score) and boot times, which change from pass to pass;
    :class:`ViewCache` keeps one between views of the same offerings.
    ``source`` is the offerings in the order given (the cache's key);
    ``row_of`` the first row of each market, ``more_rows`` the others of a
    market listed twice; ``regional_rows`` every row of a (provider, region,
    instance type), where a per-region spot price lands; ``group`` a row's
    (provider, GPU), the reliability book's prior group.
    """

    source: tuple[Offering, ...]
    offerings: tuple[Offering, ...]
    provider: np.ndarray
    provider_names: tuple[str, ...]
    region: np.ndarray
    region_names: tuple[str, ...]
    zone: np.ndarray
    zone_names: tuple[str, ...]
    gpu: np.ndarray
    gpu_names: tuple[str, ...]
    instance_type: np.ndarray
    instance_type_names: tuple[str, ...]
    place: np.ndarray
    place_names: tuple[tuple[str, str], ...]
    gpu_count: np.ndarray
    vcpus: np.ndarray
    memory_gib: np.ndarray
    gpu_memory_gib: np.ndarray
    effective_tflops_per_gpu: np.ndarray
    nominal_tflops_per_gpu: np.ndarray
    interconnect_rank: np.ndarray
    on_demand_price_usd_per_hour: np.ndarray
    catalog_spot_price_usd_per_hour: np.ndarray
    row_of: Mapping[MarketKey, int]
    more_rows: Mapping[MarketKey, tuple[int, ...]]
    regional_rows: Mapping[tuple[str, str, str], np.ndarray]
    group: np.ndarray
    group_names: tuple[tuple[str, str], ...]
    copy_rows: np.ndarray  # every row of ``more_rows``…
    copy_from: np.ndarray  # …and its market's first row

    def __len__(self) -> int:
        return len(self.offerings)

    def rows(self, key: MarketKey) -> tuple[int, ...]:
        """Every row of one market (none when no offering is in it)."""
        first = self.row_of.get(key)
        if first is None:
            return ()
        return (first, *self.more_rows.get(key, ()))

    def key_of(self, row: int) -> MarketKey:
        o = self.offerings[row]
        return (o.provider, o.region, o.zone or "", o.instance_type)


def offering_columns(offerings: Sequence[Offering]) -> OfferingColumns:
    """The offerings as columns, rows in market order (see :class:`OfferingTable`)."""
    source = tuple(offerings)
    n = len(source)
    provider, provider_names = _codes([o.provider for o in source])
    region, region_names = _codes([o.region for o in source])
    zone, zone_names = _codes([o.zone or "" for o in source])
    itype, itype_names = _codes([o.instance_type for o in source])
    # Rows in market order (codes order like names): a stable sort by score then breaks
    # ties the same way whatever order the providers listed their offerings in.
    perm = np.lexsort((itype, zone, region, provider))
    offers = tuple(source[i] for i in perm)
    provider, region, zone, itype = provider[perm], region[perm], zone[perm], itype[perm]
    gpu, gpu_names = _codes([o.gpu for o in offers])
    place_pairs = sorted({(o.provider, o.region) for o in offers})
    place_index = {pair: i for i, pair in enumerate(place_pairs)}
    place = np.fromiter(
        (place_index[(o.provider, o.region)] for o in offers), dtype=np.int32, count=n
    )
    group_pairs = sorted({(o.provider, o.gpu) for o in offers})
    group_index = {pair: i for i, pair in enumerate(group_pairs)}
    group = np.fromiter((group_index[(o.provider, o.gpu)] for o in offers), dtype=np.int32, count=n)
    memory, tflops, nominal = _gpu_facts(offers)
    row_of, more, regional = _market_rows(offers)
    return OfferingColumns(
        source=source,
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
        on_demand_price_usd_per_hour=np.fromiter(
            (_nan_or(o.on_demand_price_usd_per_hour) for o in offers), dtype=float, count=n
        ),
        catalog_spot_price_usd_per_hour=np.fromiter(
            (_nan_or(o.spot_price_usd_per_hour) for o in offers), dtype=float, count=n
        ),
        row_of=row_of,
        more_rows={k: tuple(v) for k, v in more.items()},
        regional_rows={k: np.array(v, dtype=np.intp) for k, v in regional.items()},
        group=group,
        group_names=tuple(group_pairs),
        copy_rows=np.array([i for rows in more.values() for i in rows], dtype=np.intp),
        copy_from=np.array([row_of[k] for k, rows in more.items() for _ in rows], dtype=np.intp),
    )


def _gpu_facts(offers: Sequence[Offering]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's GPU memory (GiB), effective and nominal TFLOPS per GPU."""
    n = len(offers)
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
    return memory, tflops, nominal


def _market_rows(
    offers: Sequence[Offering],
) -> tuple[dict[MarketKey, int], dict[MarketKey, list[int]], dict[tuple[str, str, str], list[int]]]:
    """Each market's first row, the other rows of a market listed twice, and every row of each
    (provider, region, instance type)."""
    row_of: dict[MarketKey, int] = {}
    more: dict[MarketKey, list[int]] = {}
    regional: dict[tuple[str, str, str], list[int]] = {}
    for i, o in enumerate(offers):
        market = (o.provider, o.region, o.zone or "", o.instance_type)
        if market in row_of:
            more.setdefault(market, []).append(i)
        else:
            row_of[market] = i
        regional.setdefault((o.provider, o.region, o.instance_type), []).append(i)
    return row_of, more, regional


@dataclass(frozen=True, eq=False)
class LiveColumns:
    """One pass's live state of every row of an :class:`OfferingColumns` (NaN: not reported)."""

    spot_price_usd_per_hour: np.ndarray  # the live price; NaN: none (the catalog's is used)
    available: np.ndarray  # bool
    preemption_rate_per_h: np.ndarray
    reliability_score: np.ndarray  # NaN: derived from λ
    mean_outage_s: np.ndarray
    spot_missing: np.ndarray | None = None  # bool: a spot price that cannot be true (none used)


def _live_from_states(
    columns: OfferingColumns, markets: Mapping[MarketId, MarketState], default_rate: float
) -> LiveColumns:
    n = len(columns)
    spot = np.full(n, math.nan)
    available = np.ones(n, dtype=bool)
    rate = np.full(n, default_rate)
    score = np.full(n, math.nan)
    outage = np.full(n, math.nan)
    for m, state in markets.items():
        for i in columns.rows((m.provider, m.region, m.zone, m.instance_type)):
            spot[i] = _nan_or(state.spot_price_usd_per_hour)
            available[i] = state.available
            rate[i] = state.preemption_rate_per_h
            score[i] = _nan_or(state.reliability_score)
            outage[i] = _nan_or(state.mean_outage_s)
    return LiveColumns(spot, available, rate, score, outage)


class ColumnMarkets(Mapping[MarketId, MarketState]):
    """A view's ``markets`` kept as columns: a :class:`MarketState` is made only when asked for.

    What :func:`gather_market_view` hands its view, so a pass over 100,000
    markets makes no 100,000 objects; reads like any mapping (one entry per
    market of the offerings).
    """

    def __init__(self, columns: OfferingColumns, live: LiveColumns) -> None:
        self.columns = columns
        self.live = live

    def _state(self, market: MarketId, i: int) -> MarketState:
        live = self.live

        def known(v: float) -> float | None:
            return None if math.isnan(v) else float(v)

        return MarketState(
            market=market,
            spot_price_usd_per_hour=known(live.spot_price_usd_per_hour[i]),
            available=bool(live.available[i]),
            preemption_rate_per_h=float(live.preemption_rate_per_h[i]),
            reliability_score=known(live.reliability_score[i]),
            mean_outage_s=known(live.mean_outage_s[i]),
        )

    def __getitem__(self, market: MarketId) -> MarketState:
        if not isinstance(market, MarketId):
            raise KeyError(market)
        key = (market.provider, market.region, market.zone, market.instance_type)
        i = self.columns.row_of.get(key)
        if i is None:
            raise KeyError(market)
        return self._state(market, i)

    def __iter__(self) -> Iterator[MarketId]:
        return (MarketId(*key) for key in self.columns.row_of)

    def __len__(self) -> int:
        return len(self.columns.row_of)


class ViewCache:
    """Keeps the last offerings' columns between views, so a pass pays only for what changed.

    :func:`gather_market_view` given one reuses the columns while the
    providers list the same offerings (equal, in the same order; the same
    objects compare at pointer speed) and builds them again when any changed.
    One per caller (the controller's observer keeps one); not thread-safe.
    """

    def __init__(self) -> None:
        self._columns: OfferingColumns | None = None
        self.builds = 0  # how many times the columns were built (for tests and benches)

    def columns(self, offerings: tuple[Offering, ...]) -> OfferingColumns:
        cached = self._columns
        if cached is not None and (cached.source is offerings or cached.source == offerings):
            return cached
        self._columns = offering_columns(offerings)
        self.builds += 1
        return self._columns


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
        """The offerings as columns (built on first use, then kept with the view).

        A view whose ``markets`` are :class:`ColumnMarkets` of its own offerings
        (what :func:`gather_market_view` makes) reuses their columns: only the
        boot times and the derived score are computed here.
        """
        markets = self.markets
        if isinstance(markets, ColumnMarkets) and markets.columns.source is self.offerings:
            columns, live = markets.columns, markets.live
        else:
            columns = offering_columns(self.offerings)
            live = _live_from_states(columns, markets, self.default_preemption_rate_per_h)
        c = columns
        spot = np.where(
            np.isnan(live.spot_price_usd_per_hour),
            c.catalog_spot_price_usd_per_hour,
            live.spot_price_usd_per_hour,
        )
        spot = spot if live.spot_missing is None else np.where(live.spot_missing, np.nan, spot)
        rate = live.preemption_rate_per_h
        derived = np.clip(DEFAULT_AVAILABILITY * np.exp(-rate * REFERENCE_RUN_H), 0.0, 1.0)
        score = np.where(np.isnan(live.reliability_score), derived, live.reliability_score)
        boot = np.array([self.boot_s_of(name) for name in c.provider_names], dtype=float)
        return OfferingTable(
            offerings=c.offerings,
            provider=c.provider,
            provider_names=c.provider_names,
            region=c.region,
            region_names=c.region_names,
            zone=c.zone,
            zone_names=c.zone_names,
            gpu=c.gpu,
            gpu_names=c.gpu_names,
            instance_type=c.instance_type,
            instance_type_names=c.instance_type_names,
            place=c.place,
            place_names=c.place_names,
            gpu_count=c.gpu_count,
            vcpus=c.vcpus,
            memory_gib=c.memory_gib,
            gpu_memory_gib=c.gpu_memory_gib,
            effective_tflops_per_gpu=c.effective_tflops_per_gpu,
            nominal_tflops_per_gpu=c.nominal_tflops_per_gpu,
            interconnect_rank=c.interconnect_rank,
            on_demand_price_usd_per_hour=c.on_demand_price_usd_per_hour,
            spot_price_usd_per_hour=spot,
            spot_available=live.available,
            preemption_rate_per_h=rate,
            reliability_score=score,
            boot_s=boot[c.provider] if len(c) else np.empty(0),
        )


def gather_market_view(
    providers: Iterable[Provider],
    reliability: ReliabilityBook | Callable[[float], ReliabilityBook | None] | None = None,
    now: float | None = None,
    boot_s: Mapping[str, float] | None = None,
    *,
    cache: ViewCache | None = None,
    on_error: Callable[[Provider, Exception], None] | None = None,
    on_note: Callable[[str], object] | None = None,
) -> MarketView:
    """Ask each provider for its offerings and spot prices, and the book for λ: the one I/O here.

    ``now`` defaults to the newest spot price's timestamp (the providers'
    clock, which a simulated cloud runs faster than the wall), else 0.
    A zone's own spot price wins over its region's. λ and the score come from
    ``reliability`` — a book, or a callable given ``now`` that returns one (the
    book of the window ending at the providers' time) — using its priors (per
    provider and GPU) for markets it never saw; without one, the defaults.
    Boot times: ``boot_s`` where it names the provider, else the provider's
    ``capabilities.typical_boot_s``, else :data:`DEFAULT_BOOT_S`.

    ``cache`` keeps the offerings' columns between calls (:class:`ViewCache`).
    ``on_error``: a provider whose listing raises is left out of this view and
    handed to it with the error; without it the error propagates. A spot price that cannot be
    true is taken as missing (:mod:`.price_checks`), said through ``on_note`` (else logged).
    """
    offerings: list[Offering] = []
    prices: list[SpotPrice] = []
    boots: dict[str, float] = {}
    for provider in providers:
        try:
            listed = provider.list_offerings()
            priced = provider.spot_prices()
        except Exception as exc:
            if on_error is None:
                raise
            on_error(provider, exc)
            continue
        offerings.extend(listed)
        prices.extend(priced)
        typical = provider.capabilities.typical_boot_s
        if typical is not None:
            boots[provider.name] = float(typical)
    boots.update(boot_s or {})
    newest = max(map(attrgetter("timestamp"), prices), default=0.0)
    when = newest if now is None else now
    book = reliability(when) if callable(reliability) else reliability
    columns = (cache or ViewCache()).columns(tuple(offerings))
    live = _live_columns(columns, prices, book)
    live = replace(
        live, spot_missing=implausible_spot(columns, live.spot_price_usd_per_hour, on_note)
    )
    return MarketView(
        now=when, offerings=columns.source, markets=ColumnMarkets(columns, live), boot_s=boots
    )


_PRICE_KEY = attrgetter("provider", "region", "zone", "instance_type")
_PRICE = attrgetter("price_usd_per_hour")
_AVAILABLE = attrgetter("available")


def _live_columns(
    columns: OfferingColumns, prices: Sequence[SpotPrice], book: ReliabilityBook | None
) -> LiveColumns:
    """This pass's prices, capacity and λ, written into the rows they are about."""
    n = len(columns)
    spot = np.full(n, math.nan)
    available = np.ones(n, dtype=bool)
    count = len(prices)
    # Column-wise, in C (map over attrgetter and dict.get): a Python loop over 100,000
    # prices would cost more than the whole rank.
    rows = np.fromiter(
        map(columns.row_of.get, map(_PRICE_KEY, prices), repeat(-1)), dtype=np.intp, count=count
    )
    price = np.fromiter(map(_PRICE, prices), dtype=float, count=count)
    up = np.fromiter(map(_AVAILABLE, prices), dtype=bool, count=count)
    for j in np.flatnonzero(rows < 0):  # a region's price (zone None): every zone of it, first
        p = prices[int(j)]
        these = columns.regional_rows.get((p.provider, p.region, p.instance_type))
        if p.zone is None and these is not None:
            spot[these] = p.price_usd_per_hour
            available[these] = p.available
    zonal = rows >= 0
    spot[rows[zonal]] = price[zonal]
    available[rows[zonal]] = up[zonal]
    if len(columns.copy_rows):  # a market listed twice: its other rows as its first
        spot[columns.copy_rows] = spot[columns.copy_from]
        available[columns.copy_rows] = available[columns.copy_from]
    score = np.full(n, math.nan)
    outage = np.full(n, math.nan)
    if book is None:
        rate = np.full(n, DEFAULT_PREEMPTION_RATE_PER_H)
    else:
        prior = np.array(
            [
                book.prior_for(MarketId(provider, "", "", ""), gpu).rate_per_h
                for provider, gpu in columns.group_names
            ],
            dtype=float,
        )
        rate = prior[columns.group] if n else np.empty(0)
        for market, known in book.markets.items():
            for i in columns.rows(
                (market.provider, market.region, market.zone, market.instance_type)
            ):
                rate[i] = known.preemption_rate_per_h
                score[i] = known.score
                outage[i] = _nan_or(known.mean_time_to_regain_s)
    return LiveColumns(spot, available, rate, score, outage)
