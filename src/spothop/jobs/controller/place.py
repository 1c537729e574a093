"""Where a job's next instances may go: its usable candidates this pass, per tolerance.

Pure, like ``decide`` that uses it. For one job, :class:`JobPlacement` ranks
the market once per kind (``scheduler.placement.rank``) and then hands out
candidates:

- **Reserved first.** The pools a job may use (:func:`pools_of`: the
  providers' listed pools, narrowed to the spec's ``reserved`` entries when
  it has some) are ranked and used while a pool has room: its ``count``
  minus what is in use — the live attempts on it across every job of the
  snapshot, or the provider's own ``in_use`` if that is more — counted as
  this pass hands them out (:class:`ReservedLedger`).
- **Usable only.** Left out: spot markets cooling down (a preemption's
  cooldown is about that spot market), every kind in a cooled zone (an
  outage), the markets in the kind a launch of this job failed in within
  ``failed_market_memory_s``, and spot on an instance type an agent reported
  notice-blind when the tolerance does not keep such instances, and every
  market of a provider that refused one of this job's launches for a reason
  that repeats there (``launch_refused``: configuration, credentials, an
  invalid request; :attr:`~.snapshot.JobView.refused_by`), for the job's life;
  for an error that holds in one region only (a region not enabled, an image
  that exists in another region), every market of that provider in that region.
- **Suspected zones last.** A zone where an instance was interrupted (or got
  an advance notice) within ``zone_suspicion_s`` is *suspected*: preemptions
  cluster, and a zone that just took one instance back is likely to take the
  next. The tolerance chooses among the candidates outside suspected zones,
  and among all only when that choice is empty; reserved pools in a suspected
  zone come after every other pool.
- **Where the checkpoint may go.** A job whose checkpoint section opts in
  (``checkpoint.compatibility``, ``{}`` for the matrix's own rules) and that has
  run is placed only on GPUs the hardware compatibility matrix
  (``resources/compat.py``) lets its checkpoint move to: made on the GPU of
  its newest attempt that reached running (:func:`checkpoint_gpu_of`), under
  the spec's ``checkpoint.compatibility`` need. A refused offering counts as
  ``compatible`` in the ranking's exclusions, with the matrix's reason.
- **The tolerance decides the rest** (``scheduler.tolerance``): which kinds,
  in which order; ``market: on-demand`` and a job forced to on-demand
  (``max_interruptions``) get on-demand only.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np

from spothop.jobs.controller.config import ControllerConfig
from spothop.jobs.controller.snapshot import AttemptView, JobView, Snapshot
from spothop.jobs.spec import JobSpec, MarketChoice
from spothop.providers.reservations import Reservation
from spothop.resources.market_id import MarketId
from spothop.scheduler.market_view import MarketKind, MarketView
from spothop.scheduler.placement import (
    DEFAULT_SAVE_S,
    Candidate,
    Ranking,
    ReservedPool,
    WorkProfile,
    rank,
)
from spothop.scheduler.tolerance import (
    Choice,
    NoticeBlindResponse,
    Situation,
    TolerancePolicy,
    policy_for,
)

PoolKey = tuple[str, str, str | None]  # provider, instance type, zone (None: any zone)


def _zone_of(market: MarketId) -> MarketId:
    return MarketId(market.provider, market.region, market.zone, "")


def pools_of(spec: JobSpec, listed: Sequence[Reservation] = ()) -> tuple[ReservedPool, ...]:
    """The reserved pools a job with ``spec`` may use, given the pools the providers list.

    - No ``reserved`` in the spec: every listed pool (the user owns them all);
      ``rank`` then keeps those whose offering meets the job's requirements and
      provider, region and zone filters.
    - ``reserved`` entries: only the listed pools an entry names (same provider
      and instance type; same zone, or any zone when the entry has none), each
      up to the entry's ``count`` and its own. An entry that no listed pool
      matches stays as written (a provider that does not list its pools); a
      launch there is refused as a typed failure and fails over.

    Listed pools of one (provider, type, zone) are one pool of their summed count.
    """
    merged: dict[PoolKey, ReservedPool] = {}
    for r in listed:
        key = (r.provider, r.instance_type, r.zone)
        have = merged.get(key)
        merged[key] = ReservedPool(
            provider=r.provider,
            instance_type=r.instance_type,
            zone=r.zone,
            count=r.count + (have.count if have else 0),
            price_usd_per_hour=min(
                r.price_usd_per_hour, have.price_usd_per_hour if have else float("inf")
            ),
        )
    if not spec.reserved:
        return tuple(merged[k] for k in sorted(merged, key=str))
    out: list[ReservedPool] = []
    for entry in spec.reserved:
        wanted: PoolKey = (entry.provider, entry.instance_type, entry.zone)
        matches = [
            p
            for k, p in sorted(merged.items(), key=lambda kv: str(kv[0]))
            if _pool_matches(wanted, *k)
        ]
        if not matches:
            out.append(ReservedPool(entry.provider, entry.instance_type, entry.zone, entry.count))
        out.extend(replace(p, count=min(p.count, entry.count)) for p in matches)
    return tuple(out)


def profile_of(spec: JobSpec) -> WorkProfile:
    """The spec's work profile: its checkpoint's interval (``auto``: None, Young/Daly per
    market) and save cost (:data:`DEFAULT_SAVE_S` when it names none)."""
    ckpt = spec.checkpoint
    save_s = ckpt.save_cost_s if ckpt is not None else None
    return WorkProfile(
        checkpoint_interval_s=ckpt.interval_s if ckpt is not None else None,
        save_s=DEFAULT_SAVE_S if save_s is None else save_s,
    )


_KINDS: dict[MarketChoice, tuple[MarketKind, ...]] = {
    MarketChoice.SPOT: (MarketKind.SPOT,),
    MarketChoice.ON_DEMAND: (MarketKind.ON_DEMAND,),
    MarketChoice.AUTO: (MarketKind.SPOT, MarketKind.ON_DEMAND),
}


class PlanInputs(NamedTuple):
    """What the scheduler's ``rank`` takes from a job spec."""

    profile: WorkProfile
    kinds: tuple[MarketKind, ...]
    pools: tuple[ReservedPool, ...]


def plan_inputs(spec: JobSpec, listed: Sequence[Reservation] = ()) -> PlanInputs:
    """The scheduler's inputs from a job spec — the one conversion, for ``spothop plan`` and
    the controller alike: :func:`profile_of`, the market kinds (``market`` spot / on-demand /
    auto → spot, on-demand, both; reserved pools in the spec add the reserved kind) and
    :func:`pools_of` (``listed``: the providers' own pools). The controller then narrows the
    kinds per tolerance."""
    pools = pools_of(spec, listed)
    kinds = _KINDS[MarketChoice(spec.market)]
    if pools:
        kinds = (*kinds, MarketKind.RESERVED)
    return PlanInputs(profile_of(spec), kinds, pools)


def _pool_matches(key: PoolKey, provider: str, instance_type: str, zone: str | None) -> bool:
    return key[0] == provider and key[1] == instance_type and (key[2] is None or key[2] == zone)


@dataclass
class ReservedLedger:
    """How much of each reserved pool is in use, across the snapshot's jobs, as this pass hands it out."""

    used: dict[PoolKey, int] = field(default_factory=dict)

    @classmethod
    def of(cls, jobs: Sequence[JobView], listed: Sequence[Reservation] = ()) -> ReservedLedger:
        """Each pool's use: the live reserved attempts on it, or the provider's ``in_use`` if more."""
        ledger = cls()
        keys = sorted(
            {(p.provider, p.instance_type, p.zone) for j in jobs for p in pools_of(j.spec, listed)},
            key=str,
        )
        for job in jobs:
            for a in job.attempts:
                if a.alive and a.market_kind is MarketKind.RESERVED:
                    for key in keys:
                        if _pool_matches(key, a.provider, a.instance_type, a.zone):
                            ledger.used[key] = ledger.used.get(key, 0) + 1
                            break
        for key in keys:
            in_use = sum(
                r.in_use for r in listed if _pool_matches(key, r.provider, r.instance_type, r.zone)
            )
            if in_use > ledger.used.get(key, 0):
                ledger.used[key] = in_use
        return ledger

    def take(self, pools: Sequence[ReservedPool], candidate: Candidate) -> bool:
        """Use one instance of the first pool with room that ``candidate`` is on; False if none has room."""
        o = candidate.offering
        for pool in pools:
            key = (pool.provider, pool.instance_type, pool.zone)
            fits = _pool_matches(key, o.provider, o.instance_type, o.zone)
            if fits and self.used.get(key, 0) < pool.count:
                self.used[key] = self.used.get(key, 0) + 1
                return True
        return False


@dataclass(frozen=True)
class Options:
    """A node's launch options: reserved candidates with room first, then the tolerance's choice."""

    reserved: tuple[Candidate, ...]
    choice: Choice


class JobPlacement:
    """The usable candidates of one job in one pass (rankings computed on first use, then kept)."""

    def __init__(
        self,
        snapshot: Snapshot,
        job: JobView,
        config: ControllerConfig,
        cooled: frozenset[MarketId],
        blind_types: frozenset[tuple[str, str]],
        suspected: frozenset[MarketId] = frozenset(),
    ) -> None:
        self.snapshot = snapshot
        self.suspected = suspected
        self.job = job
        self.config = config
        self.cooled = cooled
        self.spec = job.spec
        self.policy: TolerancePolicy = policy_for(str(self.spec.tolerance))
        keeps_blind = self.policy.notice_blind(self.situation) is NoticeBlindResponse.KEEP
        self.blind_types = frozenset() if keeps_blind else blind_types
        self.inputs = plan_inputs(self.spec, snapshot.reservations)
        self.checkpoint_gpu = checkpoint_gpu_of(job, snapshot.market)
        ckpt = self.spec.checkpoint
        need = ckpt.compatibility.need() if ckpt is not None and ckpt.compatibility else None
        self.requirements = self.spec.requirements().moving_from(self.checkpoint_gpu, need)
        self.pools = self.inputs.pools
        self._rankings: dict[MarketKind, Ranking] = {}
        self._usable: dict[MarketKind, tuple[Candidate, ...]] = {}

    @property
    def situation(self) -> Situation:
        return Situation(
            now=self.snapshot.now,
            interruption_times=self.job.interruption_times,
            prefer_spot=self.spec.market is not MarketChoice.AUTO,
        )

    def _failed(self, kind: MarketKind) -> frozenset[MarketId]:
        horizon = self.snapshot.now - self.config.failed_market_memory_s
        return frozenset(
            a.market
            for a in self.job.attempts
            if a.market_failed
            and a.market_kind is kind
            and (a.ended_at if a.ended_at is not None else a.launched_at) >= horizon
        )

    def ranking(self, kind: MarketKind) -> Ranking:
        if kind not in self._rankings:
            exclude: set[MarketId] = set(self._failed(kind))
            if kind is MarketKind.SPOT:
                exclude |= {m for m in self.cooled if m.instance_type}
            self._rankings[kind] = rank(
                self.snapshot.market,
                self.requirements,
                self.inputs.profile,
                kinds=(kind,),
                exclude=sorted(exclude),
                reserved=self.pools if kind is MarketKind.RESERVED else (),
            )
        return self._rankings[kind]

    def usable(self, kind: MarketKind) -> tuple[Candidate, ...]:
        """The best ``candidate_limit`` candidates of ``kind`` that may be used now, best first."""
        if kind not in self._usable:
            if kind is MarketKind.RESERVED and not self.pools:
                self._usable[kind] = ()
            else:
                found = _take(self._filtered(kind), self.config.candidate_limit)
                self._usable[kind] = found
        return self._usable[kind]

    def _filtered(self, kind: MarketKind) -> Iterator[Candidate]:
        for candidate in self.ranking(kind).candidates:
            market = candidate.market_id
            if _zone_of(market) in self.cooled or self.job.refuses(market):
                continue
            if (
                kind is MarketKind.SPOT
                and (market.provider, market.instance_type) in self.blind_types
            ):
                continue
            yield candidate

    def others_can_take(self) -> bool:
        """Whether a provider that has not refused this job (:attr:`~.snapshot.JobView.refused_by`)
        offers what it needs in a kind it may use, now or once cooldowns and failed markets pass."""
        kinds = [MarketKind.ON_DEMAND]
        if self.spec.market is not MarketChoice.ON_DEMAND and not self.job.on_demand_forced:
            kinds.append(MarketKind.SPOT)
        if self.pools:
            kinds.append(MarketKind.RESERVED)
        ranking = rank(
            self.snapshot.market,
            self.requirements,
            self.inputs.profile,
            kinds=kinds,
            reserved=self.pools,
        )
        return any(not self.job.refuses(c.market_id) for c in ranking.candidates)

    def options(self, on_demand_only: bool) -> Options:
        """Reserved candidates (not yet checked for room) and the tolerance's choice for one node.

        Suspected zones last (module docstring): reserved pools in them after every other
        pool; the tolerance chooses among the candidates outside them, and among all only
        when that choice is empty.
        """
        reserved = self.usable(MarketKind.RESERVED)
        if self.suspected:
            fresh = tuple(c for c in reserved if not self._suspected(c))
            reserved = fresh + tuple(c for c in reserved if self._suspected(c))
            choice = self._choice(on_demand_only, avoid_suspected=True)
            if choice.candidates:
                return Options(reserved, choice)
        choice = self._choice(on_demand_only, avoid_suspected=False)
        if not choice.candidates and self.job.refused_by:  # say why that provider is not tried
            refused = "; ".join(
                f"{where} refused: {a.error_message or a.error_code}"
                for where, a in sorted(self.job.refused_by.items())
            )
            choice = Choice((), f"{choice.reason}; {refused}")
        return Options(reserved, choice)

    def _suspected(self, candidate: Candidate) -> bool:
        return _zone_of(candidate.market_id) in self.suspected

    def _choice(self, on_demand_only: bool, avoid_suspected: bool) -> Choice:
        def kept(kind: MarketKind) -> tuple[Candidate, ...]:
            found = self.usable(kind)
            return tuple(c for c in found if not self._suspected(c)) if avoid_suspected else found

        on_demand = kept(MarketKind.ON_DEMAND)
        if on_demand_only or self.spec.market is MarketChoice.ON_DEMAND:
            why = "on-demand only" if on_demand_only else "market: on-demand"
            if not on_demand:
                why += (
                    f": no usable on-demand market ({self.ranking(MarketKind.ON_DEMAND).explain()})"
                )
            return Choice(on_demand, why)
        choice = self.policy.choose(kept(MarketKind.SPOT), on_demand, self.situation)
        if not choice.candidates:
            choice = Choice((), f"{choice.reason} ({self.ranking(MarketKind.SPOT).explain()})")
        return choice


def _take(candidates: Iterator[Candidate], limit: int) -> tuple[Candidate, ...]:
    out: list[Candidate] = []
    for candidate in candidates:
        out.append(candidate)
        if len(out) >= limit:
            break
    return tuple(out)


def refusal_reason(refused: dict[str, AttemptView]) -> str:
    """Why a job fails when every provider that could take it refused its launches: each
    provider's error, its whole text (the cloud's message and the fix it names)."""
    said = "; ".join(
        f"{where} refused: {a.error_message or a.error_code or 'no message'}"
        for where, a in sorted(refused.items())
    )
    return (
        f"no allowed provider can launch this job: {said} "
        "(the error repeats on every launch there: fix it, then submit the job again)"
    )


def checkpoint_gpu_of(job: JobView, market: MarketView) -> str | None:
    """The GPU the job's newest checkpoint was made on, as far as the controller can tell.

    That is the GPU of the job's newest attempt that reached running (its
    worker is the one that saved last: at its interval, and on every notice),
    looked up by (provider, instance type) among the view's offerings. None
    when the spec has no checkpoint section or does not opt in to the matrix
    (``checkpoint.compatibility``), no attempt ran, or the type is
    not in the view (nothing is then imposed). An approximation: an attempt
    that ran and never saved makes the bound its GPU's, not the one the
    checkpoint was made on; the worker's own check at restore
    (``checkpoint/hardware.py``: the manifest records its GPU) is the last word.
    """
    if job.spec.checkpoint is None or job.spec.checkpoint.compatibility is None:
        return None  # no checkpoint, or the job did not opt in to the matrix
    ran = sorted((a for a in job.attempts if a.running_at is not None), key=_ran_at, reverse=True)
    if not ran:
        return None
    t = market.table
    for a in ran:
        if a.provider not in t.provider_names or a.instance_type not in t.instance_type_names:
            continue
        rows = np.flatnonzero(
            (t.provider == t.provider_names.index(a.provider))
            & (t.instance_type == t.instance_type_names.index(a.instance_type))
        )
        if rows.size:
            return t.gpu_names[int(t.gpu[rows[0]])]
    return None


def _ran_at(a: AttemptView) -> float:
    return a.running_at if a.running_at is not None else float("-inf")


def blind_types_of(jobs: Sequence[JobView]) -> frozenset[tuple[str, str]]:
    """(provider, instance type) of every attempt an agent reported notice-blind."""
    return frozenset(
        (a.provider, a.instance_type) for j in jobs for a in j.attempts if a.notice_blind
    )


def suspected_zones(jobs: Sequence[JobView], now: float, suspicion_s: float) -> frozenset[MarketId]:
    """Zones (``instance_type == ""``) where an attempt of any job was interrupted, or got an
    advance notice, within ``suspicion_s`` before ``now``."""
    out = set()
    for job in jobs:
        for a in job.attempts:
            t = a.interrupted_at if a.interrupted else a.noticed_at
            if a.zone and t is not None and now - t < suspicion_s:
                out.add(_zone_of(a.market))
    return frozenset(out)


def cooled_markets(snapshot: Snapshot, extra: Sequence[MarketId] = ()) -> frozenset[MarketId]:
    """Markets and zones cooling down at ``snapshot.now`` (plus those cooled in this pass)."""
    live = {m for m, until in snapshot.cooldowns.items() if until > snapshot.now}
    return frozenset(live | set(extra))
