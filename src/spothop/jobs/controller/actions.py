"""What :func:`~spothop.jobs.controller.decide.decide` asks for: frozen, comparable, printable actions.

The executor (``jobs/controller/executor.py``) carries each one out against
the providers and the job store, in the order ``decide`` returned them, each
timed and isolated (one failing never stops the next). Every action carries
the ``reason`` it was decided for, which the executor records with the event
it writes, so a job's history says *why* as well as *what*.

Rules every action keeps, so that deciding again is always safe:

- **Idempotent under replay.** ``decide`` is level-triggered: if the executor
  died half-way, the next snapshot yields the same actions for what was not
  done and none for what was. A :class:`Launch`'s ``token`` is derived from the
  job's attempt count, so a replayed launch carries the same token and the
  executor refuses the duplicate.
- **Store first, cloud second.** A :class:`Launch` writes its attempt (with
  the token as a tag) before the provider call; a :class:`Terminate` of an
  instance that is already gone is a success.
- **Times are the snapshot's** (``until_s``, ``at_s``): unix seconds on the
  clock that built the snapshot, real or virtual.

``to_dict()`` gives a JSON form (``action`` names the type) for events, logs
and ``--json``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar

from spothop.jobs.lifecycle import AttemptState, EndReason, JobState
from spothop.resources.market_id import MarketId
from spothop.scheduler.placement import Candidate


@dataclass(frozen=True)
class Action:
    """The base of every action: ``kind`` names it in JSON and in events."""

    kind: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.kind}
        for f in dataclasses.fields(self):
            out[f.name] = _plain(getattr(self, f.name))
        return out


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, MarketId):
        return value.to_dict()
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | frozenset):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class Launch(Action):
    """Start one instance for ``node`` of ``job_id`` from ``candidates`` (best first).

    - ``parallel=False``: try the candidates in order and stop at the first the
      provider accepts (the first launch of a node names one candidate).
    - ``parallel=True``: a failover after a launch failure: launch every
      candidate at once, keep the first that reaches *running*, terminate the
      rest (their attempts end ``superseded``). Each gets its own attempt,
      token ``f"{token}.{i}"``.
    - ``replaces``: the attempt this one takes over from (make-before-break, a
      notice-blind replacement, a recovery); ``None`` for a node's first launch.
    - ``generation``/``group_nnodes``: a grouped task's node (docs/multinode.md): the
      group generation it joins and that generation's node count, which the
      attempt records and the node's rendezvous environment carries; ``None``
      for a job that is not grouped.

    The executor writes the attempt (state ``launching``, tags ``spothop-job``,
    ``spothop-node``, ``spothop-token``) before calling the provider, and
    records the cloud's own error code on every failure (the attempt ends
    ``launch_failed``, which the next ``decide`` fails over from).
    """

    kind: ClassVar[str] = "launch"
    job_id: str
    node: int
    candidates: tuple[Candidate, ...]
    token: str
    reason: str
    parallel: bool = False
    replaces: str | None = None
    generation: int | None = None
    group_nnodes: int | None = None


@dataclass(frozen=True)
class Terminate(Action):
    """End ``instance_id`` on ``provider`` (idempotent: an instance already gone is a success)."""

    kind: ClassVar[str] = "terminate"
    instance_id: str
    provider: str
    reason: str
    job_id: str | None = None  # None: an orphan no job owns


@dataclass(frozen=True)
class SetJobState(Action):
    """Move ``job_id`` to ``state`` (the store refuses an illegal transition; ``decide`` never asks one)."""

    kind: ClassVar[str] = "set_job_state"
    job_id: str
    state: JobState
    reason: str


@dataclass(frozen=True)
class EndAttempt(Action):
    """Close an attempt: state ``ended`` with ``reason``, at ``at_s``, with the worker's ``exit_code`` if known.

    Closing an attempt does not end its instance: a preempted instance is
    left to the cloud (its emergency checkpoint may still be uploading); a
    :class:`Terminate` comes with it where the instance must go.
    """

    kind: ClassVar[str] = "end_attempt"
    attempt_id: str
    job_id: str
    reason: EndReason
    at_s: float
    detail: str = ""
    exit_code: int | None = None
    error_code: str | None = None  # a failed launch's code (LAUNCH_CUT: the controller stopped)


@dataclass(frozen=True)
class UpdateAttempt(Action):
    """Record what was observed of a live attempt: its instance, a state, a notice, notice-blindness.

    ``fields`` holds only what changed, under the store's column names
    (``instance_id``, ``running_at``, ``noticed_at``, ``notice_final``,
    ``notice_deadline_s``, ``notice_blind``); ``state`` is the new state or
    ``None`` to keep it.
    """

    kind: ClassVar[str] = "update_attempt"
    attempt_id: str
    job_id: str
    reason: str
    state: AttemptState | None = None
    fields: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class CoolDown(Action):
    """Keep new launches off ``market`` until ``until_s`` (persisted: it survives a restart).

    A ``market`` whose ``instance_type`` is ``""`` covers a whole zone (a zone
    outage cools every type in it).
    """

    kind: ClassVar[str] = "cool_down"
    market: MarketId
    until_s: float
    reason: str


@dataclass(frozen=True)
class ForceOnDemand(Action):
    """Record that ``job_id`` runs on on-demand from now on (``max_interruptions`` reached, per its spec)."""

    kind: ClassVar[str] = "force_on_demand"
    job_id: str
    reason: str


@dataclass(frozen=True)
class RequestCheckpoint(Action):
    """Ask the agent on ``instance_id`` for a durable checkpoint now (the control plane's ``checkpoint``)."""

    kind: ClassVar[str] = "request_checkpoint"
    job_id: str
    instance_id: str
    reason: str = ""


@dataclass(frozen=True)
class RequestStop(Action):
    """Ask the agent on ``instance_id`` to stop its worker (it checkpoints, releases leases, exits 75).

    ``deadline_s``: when the worker must be done (unix seconds, the agents' wall clock; a
    group stopped for one node's notice gets that notice's deadline); ``None``: now."""

    kind: ClassVar[str] = "request_stop"
    job_id: str
    instance_id: str
    reason: str = ""
    deadline_s: float | None = None


@dataclass(frozen=True)
class EnqueueShards(Action):
    """Cut a batch job's inputs into shards and put them on its queue (idempotent: batch identity)."""

    kind: ClassVar[str] = "enqueue_shards"
    job_id: str


@dataclass(frozen=True)
class PublishOutputs(Action):
    """Publish a drained batch job's outputs (the executor records ``outputs_published`` when done)."""

    kind: ClassVar[str] = "publish_outputs"
    job_id: str


@dataclass(frozen=True)
class Waiting(Action):
    """Nothing can be done for ``node`` of ``job_id`` now (no candidate, every market cooled): why.

    ``decide`` emits it on every pass while it holds; the executor records an
    event only when the reason differs from the job's last one.
    """

    kind: ClassVar[str] = "waiting"
    job_id: str
    node: int
    reason: str


ACTION_TYPES: tuple[type[Action], ...] = (
    Launch,
    Terminate,
    SetJobState,
    EndAttempt,
    UpdateAttempt,
    CoolDown,
    ForceOnDemand,
    RequestCheckpoint,
    RequestStop,
    EnqueueShards,
    PublishOutputs,
    Waiting,
)
