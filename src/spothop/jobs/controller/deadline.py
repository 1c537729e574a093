"""A job with a ``deadline``: its deadline policy chooses the market kind each pass.

Pure, like ``decide`` that uses it. For a job whose spec has ``deadline`` (and a
work estimate, below), :func:`deadline_plan` builds the
:class:`~spothop.scheduler.policies.base.DeadlineState` a deadline policy sees
and asks :func:`~spothop.scheduler.policies.base.advise` (the spec's
``deadline_policy``, default ``spothop``; the safety rule included) for a
:class:`~spothop.scheduler.policies.base.Decision`: spot in zone *i*,
on-demand, or wait. ``decide`` then launches (and switches) only in that kind.

The state, from the job and the snapshot (docs/controller.md, "Deadlines"):

- **Time**: ``elapsed_s`` = now − the job's ``created_at``; ``deadline_s`` the
  spec's ``deadline``; ``tick_s`` the controller's ``deadline_tick_s``;
  ``restart_overhead_s`` the controller's ``restart_overhead_s`` or, unset, the
  provider's boot time.
- **Work left**: a task job: the spec's ``work`` minus the time the job ran
  (the union of its attempts' running spans, from ``running_at`` to their end
  or now; the snapshot's attempt times are on the controller's clock, as
  ``now`` and ``created_at`` are, so both sides count controller seconds). A batch job: the shards left (pending + leased) × the seconds per
  shard observed so far (the attempts' running time over the shards done,
  shared by ``workers``) or, before any shard is done, the spec's ``work``
  scaled by the share of shards left. No estimate at all: no plan (the
  tolerance decides as for a job without a deadline).
- **What runs**: the newest live attempt's kind and zone (or the newest
  attempt if the cloud took it back within the last tick: SPOT in its zone);
  its pending overhead is the restart overhead not yet past since its launch
  while it does not run, as the tick model counts it (0 for a lost instance
  that had booted), and the whole overhead for one the cloud took while its
  zone still lists spot (nothing runs there: a relaunch pays it).
- **Zones**: every zone (provider, region, zone) where the job's requirements
  are offered, sorted; each zone's spot is available when the market view
  says so for one of its qualifying spot markets (cooldowns do not hide it:
  the policy weighs the risk), at the cheapest such price, with that market's
  preemption rate, its odds of a drop per tick and mean outage; how long spot
  there has been up or down (counting the tick being decided) from the
  snapshot's ``spot_runs``, and with several zones the same for "any of them"
  (``any_zone``). The on-demand price is the cheapest qualifying on-demand
  candidate's.

What the decision does beyond the policy (docs/controller.md): a wait the
policy chose stops what runs (:meth:`DeadlinePlan.stop_actions`), as the tick
model's NONE does; where the safety rule keeps a spot instance the cloud just
took (the model then idles a tick the deadline has no room for), on-demand.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from spothop.jobs.controller.actions import Action, EndAttempt, RequestStop, Terminate
from spothop.jobs.controller.config import ControllerConfig
from spothop.jobs.controller.snapshot import AttemptView, JobView, Snapshot
from spothop.jobs.controller.spot_runs import age_s, current_run
from spothop.jobs.lifecycle import AttemptState, EndReason
from spothop.jobs.spec import JobKind
from spothop.resources.market_id import MarketId
from spothop.scheduler.market_view import MarketKind, MarketView
from spothop.scheduler.placement import Candidate, WorkProfile, rank
from spothop.scheduler.policies import base as policies
from spothop.scheduler.policies.base import (
    IDLE,
    DeadlineState,
    Decision,
    Kind,
    ZoneView,
)


@dataclass(frozen=True)
class DeadlinePlan:
    """One pass's deadline decision for a job, and the candidates that carry it out."""

    policy: str
    state: DeadlineState
    decision: Decision
    zones: tuple[MarketId, ...]  # index i of a Decision → this zone (instance_type "")
    spot: tuple[tuple[Candidate, ...], ...]  # per zone, its spot candidates, best first
    on_demand: tuple[Candidate, ...]
    chose_to_wait: bool = False  # the policy itself said wait (not: nowhere to run its choice)

    @property
    def kind(self) -> MarketKind | None:
        """The market kind to run on; None: wait."""
        return {Kind.SPOT: MarketKind.SPOT, Kind.ON_DEMAND: MarketKind.ON_DEMAND}.get(
            self.decision.kind
        )

    def candidates(self) -> tuple[Candidate, ...]:
        """Where a launch goes: spot in the chosen zone, or on-demand; nothing to wait."""
        if self.decision.kind is Kind.SPOT:
            return self.spot[self.decision.zone]
        if self.decision.kind is Kind.ON_DEMAND:
            return self.on_demand
        return ()

    def fits(self, a: AttemptView) -> bool:
        """``a`` runs what the decision asks (its kind, and for spot its zone)."""
        if self.decision.kind is Kind.ON_DEMAND:
            return a.market_kind is not MarketKind.SPOT
        if self.decision.kind is Kind.SPOT:
            return (
                a.market_kind is MarketKind.SPOT
                and _zone(a.market) == self.zones[self.decision.zone]
            )
        return False

    def stops(self, a: AttemptView) -> bool:
        """The policy chose to wait while ``a`` runs: it stops (the tick model's NONE stops what
        ran), unless the cloud is already taking it back (noticed)."""
        return self.chose_to_wait and a.alive and a.state is not AttemptState.NOTICED

    def stop_actions(self, a: AttemptView, now: float, grace_s: float) -> list[Action]:
        """Stop ``a`` to wait: its agent is asked to checkpoint and stop; one not running yet,
        or still up ``grace_s`` after the request, is terminated (ended ``terminated``)."""
        why = f"stopped to wait: {self.reason()}"
        asked = a.stop_requested_at
        booting = a.instance_id is None or a.running_at is None
        if not booting and asked is None:
            return [RequestStop(a.job_id, a.instance_id or "", why)]
        if not booting and asked is not None and now - asked <= grace_s:
            return []
        if not booting:
            why = f"still up {grace_s:.0f} s after it was asked to stop to wait"
        end = EndAttempt(a.attempt_id, a.job_id, EndReason.TERMINATED, now, why)
        if a.instance_id is None:
            return [end]
        return [Terminate(a.instance_id, a.provider, why, a.job_id), end]

    def reason(self) -> str:
        s = self.state
        what = self.decision.kind.label
        if self.decision.kind is Kind.SPOT:
            what += f" in {self.zones[self.decision.zone].zone}"
        return (
            f"deadline policy {self.policy}: {what} (work left {s.work_left_s / 3600:.2f} h, "
            f"{(s.deadline_s - s.elapsed_s) / 3600:.2f} h to the deadline)"
        )


def _zone(market: MarketId) -> MarketId:
    return MarketId(market.provider, market.region, market.zone, "")


def _run_s(attempts: Sequence[AttemptView], now: float) -> float:
    """The union of the attempts' running spans up to ``now`` (overlaps counted once)."""
    spans = sorted(
        (a.running_at, a.ended_at if a.ended_at is not None else now)
        for a in attempts
        if a.running_at is not None
    )
    total, reach = 0.0, -math.inf
    for start, end in spans:
        end = min(end, now)
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


def work_left_s(job: JobView, now: float) -> float | None:
    """The seconds of work left on one instance (module docstring); None: no estimate."""
    spec = job.spec
    if spec.kind is JobKind.BATCH:
        q = job.queue
        if q is None or not job.shards_enqueued:
            return spec.work_s
        left = q.pending + q.leased
        total = left + q.done + q.dead
        if q.done:
            per_shard = sum(_run_s([a], now) for a in job.attempts) / q.done
            return left * per_shard / max(1, spec.workers)
        if spec.work_s is None or total == 0:
            return None
        return spec.work_s * left / total
    if spec.work_s is None:
        return None
    return max(0.0, spec.work_s - _run_s(job.attempts, now))


def _usable(
    snapshot: Snapshot, job: JobView, config: ControllerConfig
) -> tuple[list[Candidate], tuple[Candidate, ...]]:
    """The job's spot and on-demand candidates, best first, less the markets its launches failed
    in within ``failed_market_memory_s`` and every market of a provider that refused it."""
    horizon = snapshot.now - config.failed_market_memory_s
    exclude = sorted(
        {
            (a.market, a.market_kind)
            for a in job.attempts
            if a.market_failed
            and (a.ended_at if a.ended_at is not None else a.launched_at) >= horizon
        },
        key=str,
    )
    view, req = snapshot.market, job.spec.requirements()
    profile = WorkProfile()
    # Providers (or regions of one) that refuse every launch of this job: left out.
    spot = rank(view, req, profile, kinds=(MarketKind.SPOT,), exclude=exclude).candidates
    od = rank(view, req, profile, kinds=(MarketKind.ON_DEMAND,), exclude=exclude).candidates
    return (
        [c for c in spot if not job.refuses(c.market_id)],
        tuple(c for c in od if not job.refuses(c.market_id)),
    )


def deadline_plan(
    snapshot: Snapshot,
    job: JobView,
    config: ControllerConfig,
) -> DeadlinePlan | None:
    """The job's deadline decision this pass; None for a job without a deadline or a work estimate.

    Markets a launch of this job failed in within ``failed_market_memory_s`` are left out, and
    every market of a provider that refused the job's launch (``launch_refused``).
    """
    spec = job.spec
    if spec.deadline_s is None:
        return None
    now = snapshot.now
    work = work_left_s(job, now)
    if work is None:
        return None
    spot_all, od = _usable(snapshot, job, config)
    view = snapshot.market
    zone_ids = sorted({_zone(c.market_id) for c in (*od, *spot_all)}, key=str)
    spot: dict[MarketId, list[Candidate]] = {z: [] for z in zone_ids}
    for c in spot_all:
        spot[_zone(c.market_id)].append(c)
    if not zone_ids:
        return None
    markets: dict[MarketId, set[MarketId]] = {z: set() for z in zone_ids}
    for c in (*od, *spot_all):
        markets[_zone(c.market_id)].add(c.market_id)
    tick = config.deadline_tick_s
    zones: list[ZoneView] = []
    for z in zone_ids:
        found = spot[z]
        if found:
            best = min(found, key=lambda c: c.price_usd_per_hour)
            st = view.state_of(best.market_id)
            zone = ZoneView(
                True,
                best.price_usd_per_hour,
                preemption_rate_per_h=st.preemption_rate_per_h,
                mean_outage_s=st.mean_outage_s,
                preemption_odds_per_tick=-math.expm1(-st.preemption_rate_per_h * tick / 3600.0),
            )
        else:
            zone = ZoneView(False, _catalog_spot_price(view, z, od))
        zones.append(_with_run(zone, snapshot, markets[z], tick))
    any_zone = None
    if len(zones) > 1:
        union = ZoneView(any(z.available for z in zones), min(z.price_usd_per_hour for z in zones))
        any_zone = _with_run(union, snapshot, set().union(*markets.values()), tick)
    provider = (od[0] if od else spot_all[0]).offering.provider
    d = config.restart_overhead_s
    if d is None:
        d = view.boot_s_of(provider)
    up = [z.available for z in zones]
    last, pending = _last(job, now, config.deadline_tick_s, d, zone_ids, up)
    state = DeadlineState(
        elapsed_s=now - job.created_at,
        work_left_s=work,
        task_s=spec.work_s if spec.work_s is not None else work,
        deadline_s=spec.deadline_s,
        restart_overhead_s=d,
        tick_s=config.deadline_tick_s,
        last=last,
        pending_overhead_s=pending,
        zones=tuple(zones),
        on_demand_price_usd_per_hour=min((c.price_usd_per_hour for c in od), default=math.inf),
        any_zone=any_zone,
    )
    policy = policies.get_policy(spec.deadline_policy)
    decision = policies.advise(policy, state)
    if decision.kind is Kind.NONE and _lost_with_no_room(state):
        decision = policies.ON_DEMAND
    chose_to_wait = decision.kind is Kind.NONE
    if decision.kind is Kind.ON_DEMAND and not od:
        decision = IDLE
    return DeadlinePlan(
        spec.deadline_policy,
        state,
        decision,
        tuple(zone_ids),
        tuple(tuple(spot[z]) for z in zone_ids),
        od,
        chose_to_wait,
    )


def _lost_with_no_room(state: DeadlineState) -> bool:
    """The safety rule kept the spot instance the cloud just took (SIMULATION.md: SPOT with no
    pending overhead is kept, and becomes NONE): the one tick the tick model then idles is one
    the deadline has no room for, so the controller launches on-demand in the same pass."""
    return (
        state.last.kind is Kind.SPOT
        and not state.spot_running
        and state.ticks_needed(1) >= state.ticks_left()
    )


def _with_run(
    zone: ZoneView, snapshot: Snapshot, markets: set[MarketId], tick_s: float
) -> ZoneView:
    """``zone`` with how long its spot (up in any of ``markets``) has been up or down: the
    snapshot's runs, counting the tick being decided; one tick where the runs know nothing of
    these markets or disagree with what the view says now."""
    logs = [snapshot.spot_runs[m] for m in sorted(markets, key=str) if m in snapshot.spot_runs]
    seen = current_run(logs, snapshot.now)
    start = seen[1] if seen is not None and seen[0] == zone.available else None
    run = age_s(start, snapshot.now, tick_s)
    if zone.available:
        return replace(zone, up_for_s=run, down_for_s=0.0)
    return replace(zone, up_for_s=0.0, down_for_s=run)


def _catalog_spot_price(view: MarketView, zone: MarketId, od: Sequence[Candidate]) -> float:
    """A zone without spot now: its last known spot price (the market's, else the catalog's)."""
    prices = [
        p
        for c in od
        if _zone(c.market_id) == zone
        and (
            p := view.state_of(c.market_id).spot_price_usd_per_hour
            or c.offering.spot_price_usd_per_hour
        )
        is not None
    ]
    return min(prices, default=math.inf)


def _last(
    job: JobView, now: float, tick_s: float, d: float, zones: Sequence[MarketId], up: Sequence[bool]
) -> tuple[Decision, float]:
    """What ran last and its pending overhead (module docstring)."""
    if not job.attempts:
        return IDLE, 0.0
    live = [a for a in job.attempts if a.alive]
    if live:
        a = max(live, key=lambda a: (a.launched_at, a.attempt_id))
    else:
        a = max(job.attempts, key=lambda a: (a.launched_at, a.attempt_id))
        lost = (
            a.end_reason is EndReason.PREEMPTED
            and a.ended_at is not None
            and a.ended_at > now - tick_s
        )
        if not lost:
            return IDLE, 0.0
    if a.market_kind is not MarketKind.SPOT:
        kind, index = Kind.ON_DEMAND, 0
    else:
        z = _zone(a.market)
        if z not in zones:
            return IDLE, 0.0
        kind, index = Kind.SPOT, list(zones).index(z)
    pending = 0.0
    if not a.alive and kind is Kind.SPOT and up[index]:
        pending = d  # gone though its zone lists spot: nothing runs, a relaunch pays the overhead
    elif a.running_at is None or a.running_at > now:  # still booting (or lost while it booted)
        pending = max(0.0, a.launched_at + d - now)
    return Decision(kind, index), pending
