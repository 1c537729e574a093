"""The snapshot ``decide`` reads, built from one observation and the store's rows.

:func:`to_snapshot` turns an :class:`Observation` (what :mod:`.observe` read) into a
:class:`~spothop.jobs.controller.snapshot.Snapshot`: each attempt viewed on the
controller's clock with its agent's facts (:meth:`AttemptView.of`), each job's
flags from its events (:func:`job_flags`), and each batch job's queue
(:func:`queue_facts`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spothop.jobs.controller.events import agent_facts, stop_requests
from spothop.jobs.controller.snapshot import AttemptView, JobView, Snapshot
from spothop.jobs.lifecycle import JobState
from spothop.jobs.records import AttemptRecord, JobRecord
from spothop.jobs.store import JobStore
from spothop.queue.model import QueueStats

if TYPE_CHECKING:
    from spothop.jobs.spec import JobSpec
    from spothop.providers.base import Instance
    from spothop.providers.reservations import Reservation
    from spothop.resources.market_id import MarketId
    from spothop.scheduler.market_view import MarketView
    from spothop.wire.events import AgentEvent

log = logging.getLogger(__name__)


@dataclass
class Observation:
    """What one pass saw (see the module docstring); ``now`` is the controller's clock."""

    now: float
    jobs: tuple[JobRecord, ...]
    attempts: Mapping[str, tuple[AttemptRecord, ...]]  # job id → its attempts, oldest first
    instances: Mapping[str, Instance]  # instance id → instance, spothop-tagged only
    events: tuple[AgentEvent, ...]
    cooldowns: Mapping[MarketId, float]  # → until (unix s)
    market: MarketView
    listed_providers: frozenset[str] = frozenset()
    provider_errors: Mapping[str, str] = field(default_factory=dict)  # provider → why not read
    reservations: tuple[Reservation, ...] = ()  # every provider's reserved pools, in use as read
    # provider → its clock minus ``now`` at this pass: attempt times are on the provider's clock
    # (clock.py); the snapshot shows them on the controller's (a simulated cloud runs ahead).
    clock_offsets_s: Mapping[str, float] = field(default_factory=dict)
    # provider → its clock's seconds per controller second (a simulated cloud's ``speed``; 1 if
    # it keeps none): spans read on the controller's clock are the provider's over this rate.
    clock_rates: Mapping[str, float] = field(default_factory=dict)
    # Every spothop-tagged instance listed (a replica's ``instances`` are its jobs' only):
    # the orphan reconciler's, which ends this store's instances that no attempt knows.
    all_instances: Mapping[str, Instance] | None = None
    # provider → its declared boot deadline on the controller's clock (its own over its clock
    # rate); a provider not named declares none: its agents are not watched (liveness.py).
    boot_deadlines_s: Mapping[str, float] = field(default_factory=dict)

    @property
    def listed(self) -> Mapping[str, Instance]:
        return self.instances if self.all_instances is None else self.all_instances


JOB_FLAG_EVENTS = {
    "cancel_requested": "cancel_requested",
    "shards_enqueued": "shards_enqueued",
    "outputs_published": "outputs_published",
}


@dataclass(frozen=True)
class QueueFacts:
    """A batch job's queue, as ``decide`` reads it."""

    stats: QueueStats
    dead_shards: tuple[str, ...] = ()
    busy_instances: frozenset[str] | None = None


def queue_facts(
    queue_url: str | None, job_id: str, gone: frozenset[str] = frozenset()
) -> QueueFacts | None:
    """Counts always; the dead shards' ids when there are some; the workers holding leases once
    nothing is pending (only then may idle workers be released), else ``None`` (unknown).

    A lease held by a worker whose instance is ``gone`` (ended: preempted, failed,
    terminated) goes back to the queue here, at once: its agent could not hand it
    back (killed before its emergency protocol ended), and waiting out the lease
    would idle the job. Fenced tokens keep this safe even if the worker still ran.
    """
    from spothop.queue import open_queue
    from spothop.queue.errors import UnknownJobError
    from spothop.queue.model import ShardState

    try:
        with open_queue(queue_url, job_id) as queue:
            stats = queue.stats()
            if stats.leased:
                holders = {r.worker for r in queue.records(ShardState.LEASED) if r.worker}
                stale = sorted(holders & gone)
                for worker in stale:
                    released = queue.release_worker(worker)
                    log.info("released %d leases of %s (its instance is gone)", released, worker)
                if stale:
                    stats = queue.stats()
            dead = tuple(sorted(r.id for r in queue.records(ShardState.DEAD))) if stats.dead else ()
            busy = (
                frozenset(r.worker for r in queue.records(ShardState.LEASED) if r.worker)
                if stats.pending == 0
                else None
            )
    except UnknownJobError:
        return None
    return QueueFacts(stats, dead, busy)


def job_flags(store: JobStore, job_id: str) -> dict[str, bool]:
    flags = dict.fromkeys(JOB_FLAG_EVENTS.values(), False)
    for event in store.events(job_id):
        name = JOB_FLAG_EVENTS.get(event.kind)
        if name:
            flags[name] = True
    return flags


def readable_spec(store: JobStore, job: JobRecord) -> tuple[JobSpec, JobState]:
    """The job's spec and state; a stored spec that cannot be read (damaged, or written by a
    spothop whose spec this one refuses) fails that job with the reason, once, and stands in a
    spec that only ends its attempts: one unreadable job never stops the pass for the others."""
    from spothop.jobs.spec import JobSpec

    try:
        return job.spec(), JobState(str(job.state))
    except Exception as exc:  # any error reading it: the job cannot run, the others can
        detail = " ".join(str(exc).split())[:500] or type(exc).__name__
        reason = (
            f"its stored spec cannot be read ({detail}); launch the job file again "
            "(`spothop db status` inspects the store)"
        )
        log.error("job %s: %s", job.job_id, reason)
        if not JobState(str(job.state)).final:
            try:
                store.transition(job.job_id, JobState.FAILED, "job_failed", reason=reason)
            except Exception:  # another controller moved it first: it is read again next pass
                log.exception("job %s: could not be failed", job.job_id)
        stand_in = JobSpec.model_validate({"name": "unreadable", "run": "true"})
        return stand_in, JobState.FAILED


def to_snapshot(
    observation: Observation, store: JobStore, queues: Mapping[str, QueueFacts | None]
) -> Snapshot:
    """The :class:`~spothop.jobs.controller.snapshot.Snapshot` of one observation."""

    instance_ids = [
        a.instance_id for atts in observation.attempts.values() for a in atts if a.instance_id
    ]
    facts = agent_facts(store, instance_ids)
    stops = stop_requests(store, instance_ids)
    views = []
    for job in observation.jobs:
        attempts = tuple(
            AttemptView.of(
                a,
                facts.get(a.instance_id or ""),
                stops.get(a.instance_id or ""),
                observation.clock_offsets_s.get(a.provider, 0.0),
                observation.clock_rates.get(a.provider, 1.0),
                observation.now,
            )
            for a in observation.attempts.get(job.job_id, ())
        )
        spec, state = readable_spec(store, job)
        flags = job_flags(store, job.job_id)
        queue = queues.get(job.job_id)
        views.append(
            JobView(
                job_id=job.job_id,
                spec=spec,
                state=state,
                attempts=attempts,
                created_at=job.created_unix_s,
                on_demand_forced=job.on_demand_forced,
                cancel_requested=flags["cancel_requested"],
                queue=None if queue is None else queue.stats,
                shards_enqueued=flags["shards_enqueued"],
                outputs_published=flags["outputs_published"],
                dead_shards=() if queue is None else queue.dead_shards,
                busy_instances=None if queue is None else queue.busy_instances,
                reason=job.reason,
            )
        )
    listed = frozenset(observation.listed_providers)
    return Snapshot(
        now=observation.now,
        jobs=tuple(views),
        market=observation.market,
        cooldowns=dict(observation.cooldowns),
        instances=dict(observation.instances),
        listed_providers=listed,
        provider_errors=dict(observation.provider_errors),
        events=tuple(observation.events),
        reservations=tuple(observation.reservations),
        boot_deadlines_s=dict(observation.boot_deadlines_s),
    )
