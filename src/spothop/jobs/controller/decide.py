"""``decide(snapshot) -> actions``: the controller's one decision, pure and deterministic.

One pass, in this order (docs/controller.md has the tables):

1. **Fold** the agents' events and the providers' listings into the attempts
   (:mod:`.fold`): notices, exits, lost instances become attempt updates.
2. **Cool down** every market an attempt was interrupted in (or got an
   advance notice in) for ``cooldown_s`` from then, and every zone that lost
   all its instances at once (``zone_outage_*``); a zone that interrupted an
   instance within ``zone_suspicion_s`` is suspected (relaunches avoid it).
3. **Orphans**: a spothop-tagged instance no attempt owns, or whose attempt
   ended (a preempted one excepted, until its deadline), is terminated.
4. **Jobs**, those recovering first (so they get reserved capacity and the
   best markets before new jobs), then running, then pending, each oldest
   first: cancel → fail (retries, dead shards, ``max_interruptions``) →
   succeed (every node done; a batch queue drained and its outputs published)
   → per node: hand over, replace, fail over or launch → the job's state. A job
   with a deadline launches (and switches, make-before-break) only in the
   market kind its deadline policy chooses this pass (:mod:`.deadline`).
5. **Unread providers**: a live job with an instance on a provider whose listing
   failed this pass says so (:mod:`.unread`: the cloud's error and the fix).

Pure: no I/O, no clock (time is ``snapshot.now``), no randomness; the same
snapshot and config always give the same list, in the same order, and every
state change it asks for is legal from the job's current state.
"""

from __future__ import annotations

from spothop.jobs.controller.actions import Action, Waiting
from spothop.jobs.controller.config import ControllerConfig
from spothop.jobs.controller.cooldowns import cooldowns_wanted, orphans, outage_windows
from spothop.jobs.controller.fold import fold
from spothop.jobs.controller.jobrules import JobDecision, Pass, launch_order
from spothop.jobs.controller.place import (
    ReservedLedger,
    blind_types_of,
    cooled_markets,
    suspected_zones,
)
from spothop.jobs.controller.snapshot import JobView, Snapshot
from spothop.jobs.controller.unread import unread_waits
from spothop.jobs.lifecycle import EndReason, JobState


def decide(snapshot: Snapshot, config: ControllerConfig | None = None) -> list[Action]:
    """The actions that move the world in ``snapshot`` towards what its jobs want (module docstring)."""
    config = config or ControllerConfig()
    jobs, actions = fold(snapshot, config)
    cooldowns = cooldowns_wanted(snapshot, jobs, config)
    actions += cooldowns
    actions += orphans(snapshot, jobs, config)
    p = Pass(
        snapshot,
        config,
        cooled=cooled_markets(snapshot, [c.market for c in cooldowns]),
        blind_types=blind_types_of(jobs),
        reserved=ReservedLedger.of(jobs, snapshot.reservations),
        suspected=suspected_zones(jobs, snapshot.now, config.zone_suspicion_s),
        outage_opened=outage_windows(snapshot, cooldowns, config),
    )
    unread = {w.job_id: w for w in unread_waits(snapshot, jobs)}
    for job in sorted(jobs, key=_priority):
        decided = JobDecision(p, job).actions()
        if job.job_id in unread:  # its one reason this pass: a second would flip it every pass
            decided = [a for a in decided if not isinstance(a, Waiting)] + [unread[job.job_id]]
        actions += decided
    return actions


_LOSSES = (
    EndReason.PREEMPTED,
    EndReason.FAILED,
    EndReason.TERMINATED,
    EndReason.WORKER_FAILED,
    EndReason.AGENT_LOST,
    EndReason.REQUEUED,
)


def _priority(job: JobView) -> tuple[int, float, str]:
    """Recovering jobs first (a node lost or about to be), then running ones, then pending; oldest first."""
    recovering = job.state is JobState.RECOVERING or any(
        a.interrupted and a.alive for a in job.attempts
    )
    for n in range(job.node_count):
        attempts = job.node_attempts(n)
        if attempts and not any(a.alive for a in attempts) and not job.node_done(n):
            last = max(attempts, key=launch_order)
            recovering = recovering or last.end_reason in _LOSSES
    rank = 0 if recovering else 2 if job.state is JobState.PENDING else 1
    return (rank, job.created_at, job.job_id)
