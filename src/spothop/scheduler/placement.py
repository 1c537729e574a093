"""Placement: rank every way to run a job by the expected cost of *useful* work.

``rank(view, req, profile, kinds)`` looks at each offering of the
:class:`~spothop.scheduler.market_view.MarketView` in each market kind asked
for (spot, on-demand, the user's reserved pools), keeps those that meet the
:class:`~spothop.scheduler.requirements.Requirements`, and scores each::

    score = (price_usd_per_hour / goodput + egress_usd / horizon_h) / effective_tflops

in USD per useful TFLOPS-hour (``usd_per_useful_tflops_hour``), where

- ``effective_tflops`` is the instance's: per-GPU effective TFLOPS (measured,
  else nominal × efficiency) × GPUs;
- ``goodput`` (:mod:`spothop.scheduler.goodput`) is the share of paid time
  that yields kept work, from the market's preemption rate λ, the checkpoint
  interval and save cost, the restart and the provider's boot time; on-demand
  and reserved capacity are not preempted (λ = 0);
- ``egress_usd`` (:mod:`spothop.scheduler.egress`) is what bringing the job's
  data (inputs and newest checkpoint, ``profile.data_gib``) from
  ``profile.data_location`` costs; it is paid once, so it is spread over the
  ``horizon_h`` useful hours the placement is expected to carry.

So a cheap stormy market can lose to a slightly dearer calm one, and a move
to another cloud is made only when the saving over the horizon pays for the
bytes.

Contract of :func:`rank`:

- **Pure and deterministic**: no I/O, no clock; the order does not depend on
  the order of the view's offerings (ties break on kind — spot, on-demand,
  reserved — then provider, region, zone, instance type).
- **Fast**: the view's columns (:meth:`MarketView.table`) are scored at once
  with numpy; :class:`Candidate` objects are built only for the rows read, so
  100,000 offerings rank within 100 ms (``bench/placement.py``).
- A spot candidate needs a spot price and capacity now (``available``); an
  on-demand one an on-demand price; a reserved one a pool in
  ``reserved`` whose (provider, instance type, zone) is an offering that meets
  the requirements (a pool with ``zone`` ``None`` matches every zone).
- ``exclude`` holds markets to skip — a :class:`MarketId` skips it in every
  kind, a ``(MarketId, MarketKind)`` pair in that kind only (cool-downs).
- :class:`Ranking` says how many offerings each requirement excluded
  (``excluded``, keys from :data:`~spothop.scheduler.requirements.FILTERS`
  plus ``market``: met every filter but had no price or capacity in the kinds
  asked for, and ``excluded_markets``) and which excluded the most
  (``most_excluding``), so an empty ranking explains itself
  (:meth:`Ranking.explain`, :meth:`Ranking.raise_if_empty`).
- With ``ordered`` alternatives (``Requirements.ordered``) candidates go in
  preference order: every candidate meeting an earlier alternative before any
  meeting only a later one, by score within each (``Candidate.preference``).
- With a checkpoint to carry (``Requirements.checkpoint_gpu``) an offering
  whose GPU the compatibility matrix refuses is excluded as ``compatible``;
  ``Ranking.refused`` keeps the matrix's reason for each GPU refused among
  the offerings that met every other filter.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np

from spothop.errors import ConfigError
from spothop.resources.market_id import MarketId
from spothop.resources.offering import Offering
from spothop.scheduler.egress import EgressTable, egress_table
from spothop.scheduler.errors import NoCandidates, NoCapacityNow
from spothop.scheduler.goodput import goodput_array
from spothop.scheduler.market_view import MarketKind, MarketView, OfferingTable
from spothop.scheduler.requirements import FILTERS, Requirements
from spothop.scheduler.row_filters import (
    alternative_ranks,
    excluded_rows,
    filter_masks,
    gpus_refused,
)

# The checkpoint cost and restart a job pays when its spec says nothing: a few GiB of
# state to object storage (~30 s, the checkpoint library's own initial estimate) and a
# restore plus warm-up of about a minute.
DEFAULT_SAVE_S = 30.0
DEFAULT_RESTART_S = 60.0
# One useful hour: a one-off egress cost must pay for itself within an hour of work
# unless the caller knows the job runs longer (its remaining work, its deadline).
DEFAULT_HORIZON_H = 1.0

KIND_ORDER: tuple[MarketKind, ...] = (MarketKind.SPOT, MarketKind.ON_DEMAND, MarketKind.RESERVED)


@dataclass(frozen=True)
class WorkProfile:
    """What the job's work costs to interrupt and to move.

    ``checkpoint_interval_s`` ``None``: auto (Young/Daly per market).
    ``save_s``: seconds one checkpoint save costs; ``restart_s``: seconds from
    a booted instance to work resuming. ``data_gib``: inputs plus the newest
    checkpoint, which live at ``data_location`` ``(provider, region)`` (``None``:
    nowhere yet, nothing to move). ``horizon_h``: useful hours the placement is
    expected to carry, over which egress is spread.
    """

    checkpoint_interval_s: float | None = None
    save_s: float = DEFAULT_SAVE_S
    restart_s: float = DEFAULT_RESTART_S
    data_gib: float = 0.0
    data_location: tuple[str, str] | None = None
    horizon_h: float = DEFAULT_HORIZON_H

    def __post_init__(self) -> None:
        if self.checkpoint_interval_s is not None and not self.checkpoint_interval_s > 0:
            raise ConfigError(
                f"checkpoint interval must be positive seconds, got {self.checkpoint_interval_s}"
            )
        for name in ("save_s", "restart_s", "data_gib"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise ConfigError(f"{name} must be a finite non-negative number, got {value!r}")
        if not self.horizon_h > 0:
            raise ConfigError(f"horizon_h must be positive hours, got {self.horizon_h!r}")
        if self.data_location is not None:
            object.__setattr__(self, "data_location", tuple(self.data_location))


@dataclass(frozen=True)
class ReservedPool:
    """Capacity the user owns: ``count`` instances of a type in a zone, at a rate already paid.

    ``price_usd_per_hour`` is the marginal price of using it (0: sunk), which
    is why reserved candidates rank first.
    """

    provider: str
    instance_type: str
    zone: str | None = None
    count: int = 1
    price_usd_per_hour: float = 0.0


@dataclass(frozen=True)
class Candidate:
    """One way to run one node: an offering in a market kind, with its score and every factor of it."""

    offering: Offering
    market_kind: MarketKind
    price_usd_per_hour: float
    preemption_rate_per_h: float
    effective_tflops: float
    goodput: float
    egress_usd: float
    score: float  # usd_per_useful_tflops_hour; lower is better
    # The rank of the ordered alternative it meets (Requirements.ordered): lower goes first,
    # whatever the score; 0 when the job's alternatives are not ordered.
    preference: int = 0
    factors: dict[str, float] = field(default_factory=dict, compare=False, hash=False)

    @property
    def market_id(self) -> MarketId:
        return self.offering.market_id

    @property
    def spot(self) -> bool:
        return self.market_kind is MarketKind.SPOT

    @property
    def usd_per_useful_tflops_hour(self) -> float:
        return self.score

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the market, the kind, the score and every factor; an infinite score is ``None``."""
        return {
            **self.market_id.to_dict(),
            "market_kind": self.market_kind.value,
            "gpu": self.offering.gpu,
            "gpu_count": self.offering.gpu_count,
            "price_usd_per_hour": self.price_usd_per_hour,
            "preemption_rate_per_h": self.preemption_rate_per_h,
            "effective_tflops": self.effective_tflops,
            "goodput": self.goodput,
            "egress_usd": self.egress_usd,
            "usd_per_useful_tflops_hour": self.score if math.isfinite(self.score) else None,
            "factors": {k: (v if math.isfinite(v) else None) for k, v in self.factors.items()},
        }


FIRST_SORTED = 256  # candidates put in order on first read; most callers read a handful


class CandidateList(Sequence[Candidate]):
    """The ranked candidates, best first; each :class:`Candidate` is built when first read.

    ``score[j]`` is candidate ``j``'s score in the order the rows were
    gathered (kind by kind, rows in market order). The order best-first is the
    stable sort of ``score`` — ties keep the gathered order — computed lazily:
    reading the first candidates sorts only those whose score is within the
    best :data:`FIRST_SORTED` (a partition, linear time); reading further
    sorts more, up to the whole list. Every prefix is exactly the full
    stable sort's. With ``preference`` (ordered alternatives: each candidate's rank), the
    order is by preference first, then score (stable, sorted whole).
    """

    def __init__(
        self,
        score: np.ndarray,
        build: Callable[[int], Candidate],
        preference: np.ndarray | None = None,
    ) -> None:
        self._score = score
        self._preference = preference
        self._build = build
        self._count = int(score.size)
        self._order = np.empty(0, dtype=np.int64)
        self._cache: dict[int, Candidate] = {}

    def __len__(self) -> int:
        return self._count

    def _ensure(self, needed: int) -> None:
        """Put at least the first ``needed`` candidates in order."""
        if needed <= self._order.size:
            return
        k = max(needed, 2 * self._order.size, FIRST_SORTED)
        if self._preference is not None:  # ordered alternatives: by preference, then score
            self._order = np.lexsort((self._score, self._preference))
            return
        if 4 * k >= self._count:
            self._order = np.argsort(self._score, kind="stable")
            return
        kth = np.partition(self._score, k - 1)[k - 1]
        # Everything at or below the k-th score, in gathered order, then stably by score:
        # nothing left out scores lower, so this is a prefix of the full stable sort.
        pick = np.flatnonzero(self._score <= kth)
        self._order = pick[np.argsort(self._score[pick], kind="stable")]

    def positions(self, count: int | None = None) -> np.ndarray:
        """The gathered positions of the best ``count`` (default: all) candidates, best first."""
        count = self._count if count is None else min(count, self._count)
        self._ensure(count)
        return self._order[:count]

    @overload
    def __getitem__(self, index: int) -> Candidate: ...
    @overload
    def __getitem__(self, index: slice) -> list[Candidate]: ...
    def __getitem__(self, index: int | slice) -> Candidate | list[Candidate]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._count))]
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError(index)
        found = self._cache.get(index)
        if found is None:
            self._ensure(index + 1)
            found = self._cache[index] = self._build(int(self._order[index]))
        return found

    def __iter__(self) -> Iterator[Candidate]:
        return (self[i] for i in range(self._count))

    def __repr__(self) -> str:
        return f"CandidateList({self._count} candidates)"


@dataclass(frozen=True)
class Ranking:
    """Candidates best first, with what each requirement excluded (see :func:`rank`)."""

    candidates: Sequence[Candidate]
    excluded: dict[str, int]
    most_excluding: str | None
    offerings: int = 0
    requirements: Requirements = field(default_factory=Requirements)
    refused: dict[str, str] = field(default_factory=dict)  # gpu → the matrix's reason

    def __len__(self) -> int:
        return len(self.candidates)

    def __bool__(self) -> bool:
        return len(self.candidates) > 0

    def explain(self) -> str:
        """Why the ranking is what it is: which requirement excluded the most offerings."""
        if self.offerings == 0:
            return "the market view has no offerings (no provider listed any)"
        if self.most_excluding is None:
            return f"{len(self.candidates)} candidates from {self.offerings} offerings"
        name = self.most_excluding
        what = (
            "had no price or capacity in the markets asked for"
            if name == "market"
            else "are in markets excluded now (cooling down)"
            if name == "excluded_markets"
            else f"fail {self.requirements.describe(name)}"
        )
        text = (
            f"{self.excluded[name]} of {self.offerings} offerings {what} "
            f"(the requirement that excluded the most); excluded per requirement: "
            + ", ".join(
                f"{k} {v}" for k, v in sorted(self.excluded.items(), key=lambda kv: -kv[1]) if v
            )
        )
        if self.refused:
            text += "; refused by the compatibility matrix: " + "; ".join(self.refused.values())
        return text

    def raise_if_empty(self) -> None:
        """Raise :class:`NoCandidates` (the spec excludes everything) or :class:`NoCapacityNow`."""
        if self.candidates:
            return
        if self.offerings == 0:
            raise NoCandidates(
                "no offering to place the job on: no provider listed any; check the providers "
                "the job allows (providers.allow) and that each can be reached"
            )
        if self.most_excluding in ("market", "excluded_markets"):
            raise NoCapacityNow(
                f"no candidate now: {self.explain()}; try again later or widen the market"
            )
        raise NoCandidates(
            f"no offering satisfies the job's requirements: {self.explain()}; relax that requirement"
        )

    def to_dict(self, limit: int | None = None) -> dict[str, Any]:
        shown = self.candidates if limit is None else self.candidates[:limit]
        return {
            "offerings": self.offerings,
            "candidates": [c.to_dict() for c in shown],
            "candidate_count": len(self.candidates),
            "excluded": dict(self.excluded),
            "most_excluding": self.most_excluding,
            "refused": dict(self.refused),
        }


# -- excluded markets and reserved pools ----------------------------------------------


def _reserved_rows(
    t: OfferingTable, pools: Sequence[ReservedPool]
) -> tuple[np.ndarray, np.ndarray]:
    """(row index, price) of each offering a reserved pool covers (the cheapest pool per row)."""
    price = np.full(len(t), np.inf)
    for pool in pools:
        if pool.count < 1 or pool.provider not in t.provider_names:
            continue
        if pool.instance_type not in t.instance_type_names:
            continue
        rows = (t.provider == t.provider_names.index(pool.provider)) & (
            t.instance_type == t.instance_type_names.index(pool.instance_type)
        )
        if pool.zone is not None:
            if pool.zone not in t.zone_names:
                continue
            rows &= t.zone == t.zone_names.index(pool.zone)
        price = np.where(rows, np.minimum(price, pool.price_usd_per_hour), price)
    index = np.flatnonzero(np.isfinite(price))
    return index, price[index]


# -- ranking ----------------------------------------------------------------------------


def _egress_usd(t: OfferingTable, profile: WorkProfile, table: EgressTable) -> np.ndarray:
    if profile.data_location is None or profile.data_gib <= 0 or len(t) == 0:
        return np.zeros(len(t))
    source = profile.data_location
    costs = np.array([table.cost_usd(profile.data_gib, source, place) for place in t.place_names])
    out: np.ndarray = costs[t.place]
    return out


def rank(
    view: MarketView,
    req: Requirements,
    profile: WorkProfile | None = None,
    kinds: Iterable[MarketKind | str] = (MarketKind.SPOT,),
    exclude: Iterable[MarketId | tuple[MarketId, MarketKind]] = frozenset(),
    reserved: Sequence[ReservedPool] = (),
    egress: EgressTable | None = None,
) -> Ranking:
    """Every qualifying (offering, kind), best (lowest score) first. Contract: module docstring."""
    profile = profile or WorkProfile()
    egress = egress or egress_table()
    wanted = {MarketKind(k) for k in kinds}
    t = view.table
    n = len(t)

    masks = filter_masks(t, req)
    qualifying = np.ones(n, dtype=bool)
    for mask in masks.values():
        qualifying &= mask
    excluded = {name: int(n - np.count_nonzero(masks[name])) for name in FILTERS if name in masks}
    refused = gpus_refused(t, req, masks)
    skip = excluded_rows(t, exclude, KIND_ORDER)
    priced = _price_kinds(t, wanted, qualifying, skip, reserved, excluded)
    is_spot = priced.kind_codes == KIND_ORDER.index(MarketKind.SPOT)
    ranks, allowed = alternative_ranks(t, req, priced.rows, is_spot)
    if not allowed.all():  # an alternative that names a market takes only that market's
        priced = priced.subset(allowed)
        ranks = ranks[allowed]
    scored = _score(t, profile, priced, _egress_usd(t, profile, egress), ranks)
    most = max(
        (name for name, count in excluded.items() if count > 0),
        key=lambda name: excluded[name],
        default=None,
    )
    return Ranking(
        candidates=CandidateList(
            scored.score, scored.candidate, scored.preference if req.ordered else None
        ),
        excluded=excluded,
        most_excluding=most,
        offerings=n,
        requirements=req,
        refused=refused,
    )


@dataclass(frozen=True, eq=False)
class _Priced:
    """The qualifying rows priced in the kinds asked for: kinds in KIND_ORDER, rows in market
    order within each (a stable sort by score keeps that order among ties)."""

    rows: np.ndarray  # row of the offering table
    price: np.ndarray  # USD per hour
    rate: np.ndarray  # preemption rate λ per hour (0: not preempted)
    kind_codes: np.ndarray  # index into KIND_ORDER

    def subset(self, keep: np.ndarray) -> _Priced:
        """The candidates ``keep`` (a mask over them) says, in the same order."""
        return _Priced(self.rows[keep], self.price[keep], self.rate[keep], self.kind_codes[keep])


def _kind_rows(
    t: OfferingTable,
    kind: MarketKind,
    qualifying: np.ndarray,
    skip: np.ndarray,
    reserved: Sequence[ReservedPool],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One kind's (rows, price, λ) of the qualifying rows not skipped, and the mask of rows it offers."""
    n = len(t)
    if kind is MarketKind.SPOT:
        offered = ~np.isnan(t.spot_price_usd_per_hour) & t.spot_available
        rows = np.flatnonzero(qualifying & offered & ~skip)
        price = t.spot_price_usd_per_hour[rows]
        rate = t.preemption_rate_per_h[rows]
    elif kind is MarketKind.ON_DEMAND:
        offered = ~np.isnan(t.on_demand_price_usd_per_hour)
        rows = np.flatnonzero(qualifying & offered & ~skip)
        price = t.on_demand_price_usd_per_hour[rows]
        rate = np.zeros(rows.size)
    else:
        pool_rows, pool_price = _reserved_rows(t, reserved)
        offered = np.zeros(n, dtype=bool)
        offered[pool_rows] = True
        keep = qualifying[pool_rows] & ~skip[pool_rows]
        rows, price = pool_rows[keep], pool_price[keep]
        rate = np.zeros(rows.size)
    return rows, price, rate, offered


def _price_kinds(
    t: OfferingTable,
    wanted: set[MarketKind],
    qualifying: np.ndarray,
    skip: dict[MarketKind, np.ndarray],
    reserved: Sequence[ReservedPool],
    excluded: dict[str, int],
) -> _Priced:
    """The rows of every kind wanted; counts ``market`` and ``excluded_markets`` into ``excluded``."""
    n = len(t)
    parts: list[tuple[MarketKind, np.ndarray, np.ndarray, np.ndarray]] = []
    priced_any = np.zeros(n, dtype=bool)
    skipped_any = np.zeros(n, dtype=bool)
    for kind in KIND_ORDER:
        if kind not in wanted:
            continue
        rows, price, rate, offered = _kind_rows(t, kind, qualifying, skip[kind], reserved)
        priced_any |= qualifying & offered
        skipped_any |= qualifying & offered & skip[kind]
        parts.append((kind, rows, price, rate))

    excluded["market"] = int(np.count_nonzero(qualifying & ~priced_any))
    excluded["excluded_markets"] = int(np.count_nonzero(skipped_any))

    kind_code = {kind: i for i, kind in enumerate(KIND_ORDER)}
    return _Priced(
        rows=np.concatenate([p[1] for p in parts]) if parts else np.empty(0, dtype=np.int64),
        price=np.concatenate([p[2] for p in parts]) if parts else np.empty(0),
        rate=np.concatenate([p[3] for p in parts]) if parts else np.empty(0),
        kind_codes=(
            np.concatenate([np.full(p[1].size, kind_code[p[0]], dtype=np.int8) for p in parts])
            if parts
            else np.empty(0, dtype=np.int8)
        ),
    )


@dataclass(frozen=True, eq=False)
class _Scored:
    """The priced rows scored (module docstring's formula); :meth:`candidate` builds one."""

    t: OfferingTable
    profile: WorkProfile
    priced: _Priced
    tflops: np.ndarray  # per table row: effective TFLOPS of the instance
    good: np.ndarray  # per candidate from here on
    tau: np.ndarray  # checkpoint interval, s
    egress_usd: np.ndarray
    score: np.ndarray  # USD per useful TFLOPS-hour (∞: unusable)
    preference: np.ndarray  # per candidate: the rank of the ordered alternative it meets

    def candidate(self, j: int) -> Candidate:
        t, profile, p = self.t, self.profile, self.priced
        row = int(p.rows[j])
        kind = KIND_ORDER[int(p.kind_codes[j])]
        price, rate, tflops = float(p.price[j]), float(p.rate[j]), float(self.tflops[row])
        return Candidate(
            offering=t.offerings[row],
            market_kind=kind,
            price_usd_per_hour=price,
            preemption_rate_per_h=rate,
            effective_tflops=tflops,
            goodput=float(self.good[j]),
            egress_usd=float(self.egress_usd[j]),
            score=float(self.score[j]),
            preference=int(self.preference[j]),
            factors={
                "price_usd_per_hour": price,
                "preemption_rate_per_h": rate,
                "reliability_score": float(t.reliability_score[row])
                if kind is MarketKind.SPOT
                else 1.0,
                "checkpoint_interval_s": float(self.tau[j]),
                "save_s": profile.save_s,
                "restart_s": profile.restart_s,
                "boot_s": float(t.boot_s[row]),
                "goodput": float(self.good[j]),
                "effective_tflops_per_gpu": float(t.effective_tflops_per_gpu[row]),
                "gpu_count": float(t.gpu_count[row]),
                "effective_tflops": tflops,
                "egress_usd": float(self.egress_usd[j]),
                "data_gib": profile.data_gib,
                "horizon_h": profile.horizon_h,
                "usd_per_effective_tflops_hour": float(p.price[j] / self.tflops[row]),
                "usd_per_useful_tflops_hour": float(self.score[j]),
            },
        )


def _score(
    t: OfferingTable,
    profile: WorkProfile,
    priced: _Priced,
    egress_usd: np.ndarray,
    preference: np.ndarray,
) -> _Scored:
    """Goodput and score of every priced row (``egress_usd``: per table row; ``preference``: per
    candidate, the rank of the ordered alternative it meets)."""
    tflops = t.effective_tflops_per_gpu * t.gpu_count
    rows, price = priced.rows, priced.price
    good, tau = goodput_array(
        priced.rate,
        profile.checkpoint_interval_s,
        profile.save_s,
        profile.restart_s,
        t.boot_s[rows],
    )
    egress_rows = egress_usd[rows]
    with np.errstate(divide="ignore", invalid="ignore"):
        score = (price / good + egress_rows / profile.horizon_h) / tflops[rows]
    score = np.where(np.isnan(score), np.inf, score)
    return _Scored(t, profile, priced, tflops, good, tau, egress_rows, score, preference)
