"""A job's lifecycle and an attempt's, each defined once as a table of legal transitions.

Job states (:class:`JobState`)::

    PENDING ──▶ PROVISIONING ──▶ RUNNING ──▶ SUCCEEDED
       │          │    ▲           │  ▲
       │          │    └─ PENDING  ▼  │
       │          └──────────▶ RECOVERING ──▶ SUCCEEDED
       └──── every live state ──▶ FAILED | CANCELLED

- ``PENDING``: accepted, nothing launched yet (or nothing could be: it waits).
- ``PROVISIONING``: launches are under way; no node runs yet.
- ``RUNNING``: the job's nodes (or enough of its workers) run.
- ``RECOVERING``: an instance was lost or is about to be (a final notice); a
  replacement is being placed. A batch job may finish from here (the other
  workers drained the queue).
- ``SUCCEEDED``, ``FAILED``, ``CANCELLED``: final; nothing leaves them.

A transition to the state a job is already in is not a transition: it is
refused like any other pair not in :data:`TRANSITIONS` (an event without a
state change is :meth:`spothop.jobs.store.JobStore.record_event`).

Attempt states (:class:`AttemptState`): ``launching`` (written before the
launch call) → ``pending`` (the cloud accepted it) → ``running`` → ``noticed``
(a preemption notice came) → ``ended`` (with an :class:`EndReason`). Any live
state may end; a launch may go straight to running, and a notice may come
before the instance reported running.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from enum import StrEnum

from spothop.jobs.errors import IllegalTransition

__all__ = [
    "ATTEMPT_TRANSITIONS",
    "LIVE_STATES",
    "TRANSITIONS",
    "AttemptState",
    "EndReason",
    "IllegalTransition",
    "JobState",
    "NodeState",
    "check_attempt_transition",
    "check_transition",
]


class JobState(StrEnum):
    """Where a job is in its lifecycle (see the module's table)."""

    PENDING = "pending"
    PROVISIONING = "provisioning"
    RUNNING = "running"
    RECOVERING = "recovering"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        """True for SUCCEEDED, FAILED and CANCELLED: nothing leaves them."""
        return not TRANSITIONS[self]


TRANSITIONS: Mapping[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.PROVISIONING, JobState.FAILED, JobState.CANCELLED}),
    JobState.PROVISIONING: frozenset(
        {
            JobState.RUNNING,
            JobState.PENDING,  # nothing could be launched now: wait for capacity
            JobState.RECOVERING,  # a node came up, another was lost before the job ran
            JobState.FAILED,
            JobState.CANCELLED,
        }
    ),
    JobState.RUNNING: frozenset(
        {JobState.RECOVERING, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}
    ),
    JobState.RECOVERING: frozenset(
        {JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}
    ),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


def job_state_path(current: JobState, target: JobState) -> list[JobState]:
    """The legal steps from ``current`` to ``target`` (shortest, through live states); none if there
    is no such path or they are the same state, except that a running job that must go back to
    provisioning or pending goes to recovering instead."""
    if current is target:
        return []
    if target in (JobState.PENDING, JobState.PROVISIONING) and current in (
        JobState.RUNNING,
        JobState.RECOVERING,
    ):
        target = JobState.RECOVERING
        if current is target:
            return []
    seen = {current: [current]}
    queue = deque([current])
    while queue:
        state = queue.popleft()
        for nxt in sorted(TRANSITIONS[state]):
            if nxt in seen or (nxt.final and nxt is not target):
                continue
            seen[nxt] = [*seen[state], nxt]
            if nxt is target:
                return seen[nxt][1:]
            queue.append(nxt)
    return []


"""``TRANSITIONS[a]``: the states a job in state ``a`` may move to; nothing else is legal."""

LIVE_STATES = frozenset(s for s in JobState if TRANSITIONS[s])
"""The states a controller works on (every state but the final ones)."""


def _allowed(current: str) -> str:
    for table in (TRANSITIONS, ATTEMPT_TRANSITIONS):
        for state, targets in table.items():
            if state == current:
                return ", ".join(sorted(str(t) for t in targets))
    return ""


def check_transition(current: JobState, requested: JobState, what: str = "job") -> None:
    """Return if ``current → requested`` is in :data:`TRANSITIONS`, else raise :class:`IllegalTransition`."""
    if JobState(requested) not in TRANSITIONS[JobState(current)]:
        raise IllegalTransition(what, str(current), str(requested), _allowed(str(current)))


class AttemptState(StrEnum):
    """Where one launched (or launching) instance of a node is."""

    LAUNCHING = "launching"
    PENDING = "pending"
    RUNNING = "running"
    NOTICED = "noticed"
    ENDED = "ended"


ATTEMPT_TRANSITIONS: Mapping[AttemptState, frozenset[AttemptState]] = {
    AttemptState.LAUNCHING: frozenset(
        {AttemptState.PENDING, AttemptState.RUNNING, AttemptState.NOTICED, AttemptState.ENDED}
    ),
    AttemptState.PENDING: frozenset(
        {AttemptState.RUNNING, AttemptState.NOTICED, AttemptState.ENDED}
    ),
    AttemptState.RUNNING: frozenset({AttemptState.NOTICED, AttemptState.ENDED}),
    AttemptState.NOTICED: frozenset({AttemptState.ENDED}),
    AttemptState.ENDED: frozenset(),
}
"""``ATTEMPT_TRANSITIONS[a]``: the states an attempt in state ``a`` may move to."""


def check_attempt_transition(
    current: AttemptState, requested: AttemptState, what: str = "attempt"
) -> None:
    """Like :func:`check_transition`, for an attempt's states (:data:`ATTEMPT_TRANSITIONS`)."""
    if AttemptState(requested) not in ATTEMPT_TRANSITIONS[AttemptState(current)]:
        raise IllegalTransition(what, str(current), str(requested), _allowed(str(current)))


class EndReason(StrEnum):
    """Why an attempt ended."""

    PREEMPTED = "preempted"  # the cloud took the instance back (with or without notice)
    TERMINATED = "terminated"  # spothop terminated it (the job no longer needs it)
    FAILED = "failed"  # the instance failed (it died, the cloud lost it)
    LAUNCH_FAILED = "launch_failed"  # the launch call failed in its market (error_code says why)
    # The provider refused the launch for a reason that repeats on every launch there
    # (configuration, credentials, an invalid request): error_code and error_message say which.
    LAUNCH_REFUSED = "launch_refused"
    # The same in one region only (a region not enabled, an image that exists in another
    # region): the job stops trying that provider there; its other regions may take it.
    REGION_REFUSED = "region_refused"
    SUCCEEDED = "succeeded"  # the worker exited 0: this node's work is done
    WORKER_FAILED = "worker_failed"  # the worker exited with another code (exit_code)
    ORPHAN = "orphan"  # found running with no owner and terminated by the reconciler
    SUPERSEDED = "superseded"  # a parallel failover launch another attempt won
    CANCELLED = "cancelled"  # the job was cancelled
    # Its agent never registered within the provider's boot deadline, or its heartbeats stopped:
    # spothop terminated the instance (the detail holds the console's tail where the cloud has one).
    AGENT_LOST = "agent_lost"
    # Its worker exited 75 (resumable) with no notice from the cloud and no stop asked: the worker
    # asked to be relaunched. Relaunched like a preemption, but not an interruption, and
    # ``no_progress_limit`` of them in a row fail the job (:mod:`spothop.jobs.controller.progress`).
    REQUEUED = "requeued"


def interrupted(end_reason: EndReason | None, notice_final: bool) -> bool:
    """Whether an attempt counts as an interruption: the one rule the controller
    (``max_interruptions``) and every surface (``jobs``, ``status``, ``report``, the dashboard,
    the server's API) read.

    The cloud took the instance (``preempted``), or gave a final notice of taking it
    (``notice_final``: the cloud's, not the control plane's own stop request), whatever ended
    the attempt after (a replacement that took over first ends it ``superseded``). An advance
    notice alone is not an interruption: the cloud may never act on it.
    """
    return end_reason is EndReason.PREEMPTED or notice_final


def refused_where(provider: str, region: str | None = None) -> str:
    """Where a launch was refused for good: the provider (``launch_refused``), or the provider in
    one region (``region_refused``); the key of :attr:`JobView.refused_by` and of a launch's
    refusals."""
    return provider if region is None else f"{provider} in {region}"


class NodeState(StrEnum):
    """Where one node (a task job's node, a batch job's worker) of a job is."""

    PENDING = "pending"  # needs an instance
    RUNNING = "running"  # has a running instance
    DONE = "done"  # its work is done (worker exited 0, or released as the queue drained)
    FAILED = "failed"  # failed past its retries
