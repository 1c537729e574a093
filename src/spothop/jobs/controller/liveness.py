"""Agent liveness: an instance whose agent never reports, or stops reporting, is lost.

Pure rules on the snapshot's facts (docs/controller.md, agent liveness):

- :func:`lost_why`: a live attempt whose instance its provider lists alive is
  lost when its agent has not registered ``boot_deadline`` after the launch
  (the provider's declared boot deadline on the snapshot's clock:
  ``Snapshot.boot_deadlines_s``, at least ``boot_deadline_floor_s``: installing
  spothop takes wall time whatever a simulated cloud's speed; or the config's
  override), or when its last
  heartbeat is older than ``heartbeat_interval_s × heartbeat_misses``. The fold
  ends it ``agent_lost``; the orphan rule terminates its instance in the same
  pass, the executor adds the console's tail to the detail, and the job's
  policy relaunches the node as for a failed instance.
- :func:`lost_loop`: the job's last ``agent_lost_limit`` attempts all ended
  ``agent_lost`` with none of their agents ever registering: the job fails with
  the last one's detail (the console's tail) instead of paying for more.

A provider the snapshot gives no boot deadline (a simulation, a provider that
declares none) is not watched. A noticed attempt is not: the cloud takes it.
Both spans count from the controller's start at the latest
(``Snapshot.started_for``): agents whose control plane was down with the
controller are not lost for its downtime.
"""

from __future__ import annotations

from spothop.jobs.controller.config import ControllerConfig
from spothop.jobs.controller.snapshot import AttemptView, JobView, Snapshot
from spothop.jobs.lifecycle import AttemptState, EndReason

# What an agent that never registers most often means, besides a boot script that failed (whose
# console tail follows): an instance that cannot reach the control plane.
NEVER_REGISTERED_HINT = (
    "if its console shows the agent started, the instance cannot reach the control plane "
    "(a security group or firewall without egress to the control plane's URL)"
)


def boot_deadline_s(snapshot: Snapshot, config: ControllerConfig, provider: str) -> float | None:
    """``provider``'s boot deadline on the snapshot's clock; None: its agents are not watched."""
    declared = snapshot.boot_deadlines_s.get(provider)
    if declared is None:
        return None
    if config.boot_deadline_s is not None:
        return config.boot_deadline_s
    return max(declared, config.boot_deadline_floor_s)


def lost_why(view: AttemptView, snapshot: Snapshot, config: ControllerConfig) -> str | None:
    """Why ``view``'s agent is lost (one line), or None while it is not (module docstring)."""
    if view.ended or view.instance_id is None or view.state is AttemptState.NOTICED:
        return None
    instance = snapshot.instances.get(view.instance_id)
    if instance is None or not instance.state.is_alive:
        return None  # the listing's own rules end it (fold.py)
    deadline = boot_deadline_s(snapshot, config, view.provider)
    if deadline is None:
        return None
    # A controller that just started (or a replica that just took the job) counts from then: its
    # agents could not reach a control plane that was down with it, and their beats resume.
    started = snapshot.started_for(view.job_id)
    since = float("-inf") if started is None else started
    if view.beat_at is None:
        waited = snapshot.now - max(view.launched_at, since)
        if waited > deadline:
            return (
                f"its agent did not register within the boot deadline ({deadline:.0f} s;"
                f" {waited:.0f} s waited): {NEVER_REGISTERED_HINT}"
            )
        return None
    silent = snapshot.now - max(view.beat_at, since)
    if silent > config.heartbeat_deadline_s:
        return (
            f"its agent's heartbeats stopped {silent:.0f} s ago (deadline"
            f" {config.heartbeat_deadline_s:.0f} s: {config.heartbeat_misses} intervals of"
            f" {config.heartbeat_interval_s:g} s)"
        )
    return None


def lost_loop(job: JobView, limit: int) -> str | None:
    """Why ``job`` fails: its last ``limit`` attempts with an instance all ended ``agent_lost``
    and none of their agents registered; None otherwise (``limit`` under 1: never)."""
    if limit < 1:
        return None
    tried = sorted(
        (a for a in job.attempts if a.instance_id is not None),
        key=lambda a: (a.launched_at, a.attempt_id),
    )
    last = tried[-limit:]
    if len(last) < limit or any(
        a.end_reason is not EndReason.AGENT_LOST or a.beat_at is not None for a in last
    ):
        return None
    # The newest stored console: the attempt ended in this very pass has its console read
    # when its end is written (the executor), after this rule; the loop's others have theirs.
    told = [a for a in last if a.error_message]
    tail = told[-1].error_message if told else "no console output"
    which = "the last" if told and told[-1] is last[-1] else "a lost"
    return (
        f"its agent was lost {limit} times in a row, never registering (agent_lost); {which}"
        f" instance's console: {tail}"
    )
