"""No job spins, none overspends: the rules that end a job that cannot make progress or has
spent its budget, instead of relaunching and billing in a loop.

Pure rules on a :class:`~.snapshot.JobView` (docs/controller.md, "No job spins"); each returns
the reason the job fails (one line, with the figures), or None:

- :func:`budget_why`: the job's spend reached its ``budget_usd`` (its instances are terminated
  as for any failure), or it has no instance up and the next launch's least cost (the cheapest
  price it ran at, one billing minimum on every node) would pass the budget. The spend is the
  attempts' prices over their time up (from launch to end, or to now) as each provider counts
  it: the span on the controller's clock times the provider's clock rate
  (``AttemptView.clock_rate``; a local cloud at ``speed`` 10 bills ten seconds for each of the
  controller's), so a budget is dollars billed whatever the speed. The ledger's own figure
  comes from the providers' bills, which ``decide`` does not read.
- :func:`spin_why`: ``limit`` attempts in a row whose instance failed before its worker ran
  (a boot script that fails every time); or, for a batch job none of whose shards was ever
  claimed, ``limit``
  attempts in a row whose worker exited 0 with shards still pending (a worker that never
  claims one: relaunching it changes nothing); or ``limit`` attempts in a row ended
  ``requeued`` (a worker that exits 75 with no notice from the cloud, on every instance: it
  would be relaunched and billed about once a second for ever).

A capacity shortage is never a reason here: the job waits for capacity (its nodes' ``Waiting``).
"""

from __future__ import annotations

from spothop.jobs.controller.config import ControllerConfig
from spothop.jobs.controller.liveness import lost_loop
from spothop.jobs.controller.snapshot import AttemptView, JobView
from spothop.jobs.lifecycle import EndReason, JobState
from spothop.jobs.spec import JobKind

SECONDS_PER_HOUR = 3600.0
# The least a launch costs: clouds bill a minute at least (EC2 and Compute Engine: 60 s).
BILLING_MINIMUM_S = 60.0


def stalled(job: JobView, now: float, config: ControllerConfig) -> str | None:
    """Why ``job`` fails for want of progress or money: its agents lost in a row
    (:func:`~.liveness.lost_loop`), :func:`spin_why`, :func:`budget_why`; None while none holds."""
    return (
        lost_loop(job, config.agent_lost_limit)
        or spin_why(job, config.no_progress_limit)
        or budget_why(job, now)
    )


def spent_usd(job: JobView, now: float) -> float:
    """The job's spend so far: each attempt that had an instance, its price over its time up on
    its provider's clock (the controller's span times the provider's clock rate)."""
    total = 0.0
    for a in job.attempts:
        if a.instance_id is None:
            continue
        end = a.ended_at if a.ended_at is not None else now
        billed_s = max(0.0, end - a.launched_at) * a.clock_rate
        total += a.price_usd_per_hour * billed_s / SECONDS_PER_HOUR
    return total


def budget_why(job: JobView, now: float) -> str | None:
    """Why ``job`` fails on its ``budget_usd`` (module docstring), or None."""
    budget = job.spec.budget_usd
    if budget is None:
        return None
    spent = spent_usd(job, now)
    if spent >= budget:
        return f"budget_usd reached: ${spent:.4f} spent of ${budget:g}; its instances are stopped"
    if any(a.alive for a in job.attempts):
        return None
    prices = [a.price_usd_per_hour for a in job.attempts if a.instance_id is not None]
    if not prices:
        return None
    least = min(prices) * job.node_count * BILLING_MINIMUM_S / SECONDS_PER_HOUR
    if spent + least > budget:
        return (
            f"budget_usd: ${spent:.4f} spent of ${budget:g}, and the next launch (at least "
            f"${least:.4f}: {job.node_count} node(s) × {BILLING_MINIMUM_S:g} s at "
            f"${min(prices):.4f}/h) would pass it"
        )
    return None


def spin_why(job: JobView, limit: int) -> str | None:
    """Why ``job`` fails: its last ``limit`` attempts made no progress alike (module
    docstring); None otherwise (``limit`` under 1: never)."""
    if limit < 1:
        return None
    ended = sorted(
        (a for a in job.attempts if a.ended and a.instance_id is not None),
        key=lambda a: (a.ended_at or a.launched_at, a.attempt_id),
    )
    last = ended[-limit:]
    if len(last) < limit or any(a.alive and a.instance_id is not None for a in job.attempts):
        return None
    if all(_failed_before_running(a) for a in last):
        detail = last[-1].error_message or "no reason given by the cloud"
        return (
            f"its instance failed {limit} times in a row before its worker ran; the last: {detail}"
        )
    if all(a.end_reason is EndReason.REQUEUED for a in last):
        return (
            f"its worker exited 75 {limit} times in a row with no notice from the cloud: 75 asks to "
            "be relaunched after a preemption (docs/jobs.md), and relaunching it changes nothing; "
            "exit 0 when its work is done, another code when it failed"
        )
    q = job.queue
    if (
        job.spec.kind is JobKind.BATCH
        and q is not None
        and q.attempts == 0  # no shard was ever claimed
        and q.pending > 0
        and q.leased == 0
        and all(a.end_reason is EndReason.SUCCEEDED for a in last)
    ):
        return (
            f"its worker exited 0 {limit} times in a row with {q.pending} shard(s) pending, none"
            " ever claimed: a batch worker claims shards until the queue is drained (docs/queue.md); "
            "check that run starts your worker and that it reads the job's queue"
        )
    return None


def _failed_before_running(a: AttemptView) -> bool:
    return a.end_reason is EndReason.FAILED and a.running_at is None


def deadline_missed(job: JobView, now: float, target: JobState = JobState.SUCCEEDED) -> str:
    """What a job succeeding now (``target``) says of its ``deadline`` when it missed it
    (``"; its deadline …"``), else ``""``: a late success is recorded as late, on the job's
    reason and its event."""
    deadline_s = job.spec.deadline_s
    if deadline_s is None or target is not JobState.SUCCEEDED:
        return ""
    late_s = now - job.created_at - deadline_s
    if late_s <= 0:
        return ""
    return f"; its deadline ({_span(deadline_s)} from launch) was missed by {_span(late_s)}"


def _span(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
