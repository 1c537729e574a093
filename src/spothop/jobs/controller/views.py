"""The snapshot ``decide`` reads, built from one observation and the store's rows.

:func:`to_snapshot` turns an :class:`~.observe.Observation` into a
:class:`~spothop.jobs.controller.snapshot.Snapshot`: each attempt viewed on the
controller's clock with its agent's facts (:func:`attempt_view`), each job's
flags from its events (:func:`job_flags`), and each batch job's queue
(:func:`queue_facts`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spothop.jobs.controller.events import AgentFacts, agent_facts, stop_requests
from spothop.jobs.store import AttemptRecord, JobStore

if TYPE_CHECKING:
    from spothop.jobs.controller.observe import Observation

log = logging.getLogger(__name__)

JOB_FLAG_EVENTS = {
    "cancel_requested": "cancel_requested",
    "shards_enqueued": "shards_enqueued",
    "outputs_published": "outputs_published",
}


@dataclass(frozen=True)
class QueueFacts:
    """A batch job's queue, as ``decide`` reads it."""

    stats: Any  # QueueStats
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


def attempt_view(
    record: AttemptRecord,
    facts: AgentFacts | None,
    stop_requested_at: float | None = None,
    clock_offset_s: float = 0.0,
    clock_rate: float = 1.0,
    now: float = 0.0,
) -> Any:
    """The decide view of one attempt; its stored times (the provider's clock) moved onto the
    snapshot's clock (``now``) like the agents' facts: a time ``x`` provider seconds before the
    provider's now (``now + clock_offset_s``) reads ``x / clock_rate`` seconds before ``now``, so
    spans (work done, boot, notice) are controller seconds, on an accelerated cloud too."""
    from spothop.jobs.controller import snapshot

    def moved(t: float) -> float:
        if clock_rate == 1.0:
            return t - clock_offset_s
        return now - (now + clock_offset_s - t) / clock_rate

    def shown(t: float | None) -> float | None:
        return None if t is None else moved(t)

    # The enums as the snapshot module names them (decide compares them with ``is``).
    market_kind, attempt_state, end_reason = (
        getattr(snapshot, n) for n in ("MarketKind", "AttemptState", "EndReason")
    )
    f = facts or AgentFacts()
    return snapshot.AttemptView(
        attempt_id=record.attempt_id,
        job_id=record.job_id,
        node=record.node,
        launch_token=record.launch_token,
        provider=record.provider,
        region=record.region,
        zone=record.zone or None,
        instance_type=record.instance_type,
        market_kind=market_kind(str(record.market_kind)),
        price_usd_per_hour=record.price_usd_per_hour,
        state=attempt_state(str(record.state)),
        launched_at=moved(record.launched_unix_s),
        instance_id=record.instance_id,
        running_at=shown(record.running_unix_s),
        noticed_at=shown(record.noticed_unix_s) or f.noticed_at,
        notice_final=f.notice_final,
        notice_deadline_s=f.notice_deadline_s,
        notice_blind=f.notice_blind,
        ended_at=shown(record.ended_unix_s),
        end_reason=None if record.end_reason is None else end_reason(str(record.end_reason)),
        exit_code=record.exit_code if record.exit_code is not None else f.exit_code,
        error_code=record.error_code,
        stop_requested_at=stop_requested_at,
        notice_by_controller=f.notice_by_controller,
        generation=record.generation,
        group_nnodes=record.group_nnodes,
    )


def job_flags(store: JobStore, job_id: str) -> dict[str, bool]:
    flags = dict.fromkeys(JOB_FLAG_EVENTS.values(), False)
    for event in store.events(job_id):
        name = JOB_FLAG_EVENTS.get(event.kind)
        if name:
            flags[name] = True
    return flags


def to_snapshot(
    observation: Observation, store: JobStore, queues: Mapping[str, QueueFacts | None]
) -> Any:
    """The :class:`~spothop.jobs.controller.snapshot.Snapshot` of one observation."""
    from spothop.jobs.controller import snapshot
    from spothop.jobs.controller.snapshot import JobView, Snapshot

    job_state = vars(snapshot)["JobState"]  # the enum decide compares with ``is``

    instance_ids = [
        a.instance_id for atts in observation.attempts.values() for a in atts if a.instance_id
    ]
    facts = agent_facts(store, instance_ids)
    stops = stop_requests(store, instance_ids)
    views = []
    for job in observation.jobs:
        attempts = tuple(
            attempt_view(
                a,
                facts.get(a.instance_id or ""),
                stops.get(a.instance_id or ""),
                observation.clock_offsets_s.get(a.provider, 0.0),
                observation.clock_rates.get(a.provider, 1.0),
                observation.now,
            )
            for a in observation.attempts.get(job.job_id, ())
        )
        flags = job_flags(store, job.job_id)
        queue = queues.get(job.job_id)
        views.append(
            JobView(
                job_id=job.job_id,
                spec=job.spec(),
                state=job_state(str(job.state)),
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
        events=tuple(observation.events),
        reservations=tuple(observation.reservations),
    )
