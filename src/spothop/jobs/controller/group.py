"""A grouped task's rules: its nodes launched, stopped and relaunched together, one generation at a time.

A task with several nodes (or ``reformable: true``) runs one data-parallel
process group: every node blocks in the next collective when one is gone, so
no node can be replaced alone (make-before-break does not apply) and no rank
may resume from another step than the others. ``decide`` hands such a job to
:func:`group_actions` after its cancel, failure and success rules
(docs/multinode.md has the tables):

1. **Generation.** Every attempt records the group generation it was launched
   in (``generation``, 0, 1, 2…) and that generation's node count
   (``group_nnodes``). The newest generation is the group; older ones are done.
2. **Launch together.** A generation is launched in one pass, every node on
   the same candidate market (one provider, region, zone and instance type),
   so the nodes are close and share one shape: ``NNODES`` nodes of
   ``NPROC_PER_NODE`` (the type's GPU count) processes.
3. **Break together.** The generation breaks when any node gets a notice
   (advance or final) or ends for any reason but success (preempted, lost,
   its launch failed, its worker failed). Every other live node is asked to
   stop (:class:`RequestStop`, the control plane's stop: its agent runs the
   emergency protocol, so the worker saves its part of the same step and
   exits 75) with the shortest deadline the noticed nodes were given
   (``group_advance_stop_s`` from now for an advance notice without one;
   now when a node was lost without notice: the others are blocked, there is
   nothing consistent to save, the last committed checkpoint is used). A
   node the cloud noticed is left to its own agent. A node still up
   ``group_stop_grace_s`` after its stop's deadline is terminated.
4. **A node lost before the rendezvous is replaced alone.** A node whose
   agent never registered and was found lost (``agent_lost``, :mod:`.liveness`)
   held nothing up: no node of its generation can have started its worker,
   because the rendezvous waits for every node's registered address
   (:func:`spothop.controlplane.store.group_rendezvous`). It is relaunched
   within the same generation (same rank, same port) on the generation's
   market while that market is usable; the other nodes keep waiting. Within a
   generation each node is its newest attempt. A lost node whose market is no
   longer usable, and any loss after its agent registered, breaks the
   generation (rule 3); so does a replaced node whose agent registered after
   all, between the pass that found it lost and its end's write
   (:func:`registered_late`): its peers may have met it. A loop of such
   losses fails the job (:func:`.liveness.lost_loop`).
5. **Relaunch together.** Once no node of the generation is alive, the next
   generation is launched (all nodes), from the checkpoint every rank
   committed; a node stopped with its group ended ``superseded`` (not an
   interruption: only the node the cloud took counts, and cools its market).
6. **Shape.** A job that is not re-formable relaunches at its shape only
   (``num_nodes`` nodes of its first generation's GPUs per node), waiting when
   no candidate of that shape is usable. A re-formable one takes the shape
   closest to its target world size (``num_nodes`` × the first generation's
   GPUs per node) that a usable candidate gives, within ``min_nodes`` ..
   ``max_nodes``, the better-ranked candidate on a tie: e.g. 2 nodes × 1 GPU
   → 1 node × 2 GPUs when only 2-GPU instances are left.
7. **Done together.** The job succeeds when every node of its newest
   generation exited 0.

Pure, like ``decide``: the rules read the folded attempts and the pass's
placement only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from spothop.jobs.controller.actions import Action, Launch, RequestStop, Waiting
from spothop.jobs.controller.config import ControllerConfig
from spothop.jobs.controller.place import JobPlacement
from spothop.jobs.controller.snapshot import AttemptView, JobView, Snapshot
from spothop.jobs.lifecycle import AttemptState, EndReason, JobState
from spothop.jobs.spec import JobSpec
from spothop.scheduler.market_view import MarketKind
from spothop.scheduler.placement import Candidate


class JobContext(Protocol):
    """What the group rules use of ``decide``'s per-job decision."""

    job: JobView
    spec: JobSpec
    now: float
    out: list[Action]

    @property
    def placement(self) -> JobPlacement: ...

    def snapshot(self) -> Snapshot: ...

    def config(self) -> ControllerConfig: ...

    def next_token(self) -> str: ...

    def end(self, a: AttemptView, reason: EndReason, detail: str, terminate: bool) -> None: ...

    def move(self, target: JobState, why: str) -> None: ...

    def release_all(self, reason: EndReason, detail: str) -> None: ...


@dataclass(frozen=True)
class Shape:
    """A generation's shape: ``nnodes`` instances of ``candidate`` (its GPUs: processes per node)."""

    candidate: Candidate
    nnodes: int

    @property
    def nproc_per_node(self) -> int:
        return max(1, self.candidate.offering.gpu_count)

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node


def generation_of(job: JobView) -> int:
    """The job's newest group generation; -1 before its first launch."""
    return max((a.generation for a in job.attempts), default=-1)


def members_of(job: JobView, generation: int) -> tuple[AttemptView, ...]:
    return tuple(a for a in job.attempts if a.generation == generation)


def current_of(members: Sequence[AttemptView]) -> tuple[AttemptView, ...]:
    """Each node's newest attempt among ``members`` (one generation's): a node replaced within
    its generation is its successor (rule 4), in node order."""
    newest: dict[int, AttemptView] = {}
    for a in sorted(members, key=lambda a: (a.launched_at, a.attempt_id)):
        newest[a.node] = a
    return tuple(newest[n] for n in sorted(newest))


def lost_before_rendezvous(a: AttemptView) -> bool:
    """Its agent was found lost without ever registering: its group's rendezvous cannot have
    been handed out (it waits for every node's address), so it is replaced alone (rule 4)."""
    return a.end_reason is EndReason.AGENT_LOST and a.beat_at is None


def registered_late(members: Sequence[AttemptView]) -> tuple[AttemptView, ...]:
    """The attempts of a generation replaced as lost before the rendezvous whose agents did
    register after all: in the moment between the pass that found them lost and their end's
    write, the control plane may have handed the rendezvous out with their address (rule 4)."""
    current = {a.attempt_id for a in current_of(members)}
    return tuple(
        a
        for a in members
        if a.attempt_id not in current
        and a.end_reason is EndReason.AGENT_LOST
        and a.beat_at is not None
    )


def group_nnodes(members: Sequence[AttemptView], spec: JobSpec) -> int:
    """The generation's node count as its attempts recorded it (``num_nodes`` where none did:
    attempts stored before groups were)."""
    return max((a.group_nnodes or 0 for a in members), default=0) or spec.num_nodes


def group_succeeded(job: JobView) -> bool:
    """Every node of the newest generation exited 0."""
    members = members_of(job, generation_of(job))
    nnodes = group_nnodes(members, job.spec)
    done = {a.node for a in members if a.end_reason is EndReason.SUCCEEDED}
    return nnodes > 0 and all(n in done for n in range(nnodes))


def group_actions(d: JobContext, forced_on_demand: bool) -> None:
    """The group rules of one pass for one grouped job (module docstring), into ``d.out``."""
    job = d.job
    generation = generation_of(job)
    members = members_of(job, generation)
    for a in job.attempts:  # a straggler of an older generation (adopted late): it goes
        if a.alive and a.generation < generation and a.instance_id is not None:
            d.end(a, EndReason.TERMINATED, f"generation {a.generation} was replaced", True)
    if not members:
        _launch(d, 0, members, forced_on_demand)
        return
    nnodes = group_nnodes(members, d.spec)
    late = registered_late(members)
    members = current_of(members)
    replacing = _replacements(d, members, forced_on_demand)
    broken = _broken(d, [a for a in members if a.attempt_id not in replacing], late)
    if broken is None and replacing:
        _replace(d, generation, nnodes, members, replacing)
        return
    if broken is None:
        running = {
            a.node
            for a in members
            if a.state is AttemptState.RUNNING or a.end_reason is EndReason.SUCCEEDED
        }
        if all(n in running for n in range(nnodes)):
            d.move(JobState.RUNNING, f"generation {generation}: {nnodes} of {nnodes} nodes run")
        elif generation > 0:
            d.move(JobState.RECOVERING, f"generation {generation} is starting")
        else:
            d.move(JobState.PROVISIONING, f"generation {generation}: launches under way")
        return
    why, deadline = broken
    live = [a for a in members if a.alive]
    if live:
        _stop(d, live, why, deadline)
        d.move(JobState.RECOVERING if _ran_before(job) else JobState.PROVISIONING, why)
        return
    _launch(d, generation + 1, members, forced_on_demand, why)


def _replacements(
    d: JobContext, members: Sequence[AttemptView], forced_on_demand: bool
) -> dict[str, Candidate]:
    """Attempt id → the candidate its node is relaunched on, for each node lost before the
    rendezvous whose generation's market is still usable (rule 4)."""
    found: dict[str, Candidate] = {}
    for a in members:
        if not lost_before_rendezvous(a):
            continue
        kind = MarketKind.ON_DEMAND if forced_on_demand else a.market_kind
        usable = [c for c in d.placement.usable(kind) if c.market_id == a.market]
        if usable:
            found[a.attempt_id] = usable[0]
    return found


def _replace(
    d: JobContext,
    generation: int,
    nnodes: int,
    members: Sequence[AttemptView],
    replacing: dict[str, Candidate],
) -> None:
    for a in members:
        candidate = replacing.get(a.attempt_id)
        if candidate is None:
            continue
        text = (
            f"generation {generation}: node {a.node} replaced within its generation (its agent"
            f" never registered: {a.attempt_id} {a.end_reason.value if a.end_reason else 'ended'});"
            f" the other nodes wait for the rendezvous"
        )
        d.out.append(
            Launch(
                d.job.job_id,
                a.node,
                (candidate,),
                d.next_token(),
                text,
                generation=generation,
                group_nnodes=nnodes,
            )
        )
        d.move(JobState.RECOVERING if _ran_before(d.job) else JobState.PROVISIONING, text)


def _ran_before(job: JobView) -> bool:
    return any(a.running_at is not None or a.interrupted for a in job.attempts)


def _broken(
    d: JobContext, members: Sequence[AttemptView], late: Sequence[AttemptView] = ()
) -> tuple[str, float] | None:
    """Why the generation breaks and the deadline its live nodes stop by; None while it holds.
    ``late``: replaced nodes that registered after all (:func:`registered_late`): lost ones."""
    noticed = [a for a in members if a.alive and a.state is AttemptState.NOTICED]
    lost = [
        a
        for a in members
        if a.ended and a.end_reason not in (EndReason.SUCCEEDED, EndReason.SUPERSEDED)
    ] + list(late)
    stopped = [a for a in members if a.end_reason is EndReason.SUPERSEDED]
    if noticed:
        deadlines = [a.notice_deadline_s for a in noticed if a.notice_deadline_s is not None]
        deadline = min(deadlines, default=d.now + d.config().group_advance_stop_s)
        first = min(noticed, key=lambda a: (a.noticed_at or d.now, a.node))
        kind = "a final" if first.notice_final else "an advance"
        return f"node {first.node} ({first.attempt_id}) got {kind} notice", deadline
    if lost:
        first = min(lost, key=lambda a: (a.ended_at or d.now, a.node))
        reason = first.end_reason.value if first.end_reason else "ended"
        # Lost at once: the others are blocked in their next collective; nothing to wait for.
        # The deadline is the loss itself (stable from pass to pass, so the grace can run out).
        return f"node {first.node} ({first.attempt_id}) {reason}", first.ended_at or d.now
    if stopped:
        return f"node {stopped[0].node} stopped with its group", stopped[0].ended_at or d.now
    return None


def _stop(d: JobContext, live: Sequence[AttemptView], why: str, deadline: float) -> None:
    grace = d.config().group_stop_grace_s
    for a in live:
        if a.instance_id is None:
            continue  # its launch may be under way: a later pass sees its instance, then stops it
        if a.notice_final and not a.notice_by_controller:
            continue  # the cloud's own notice: its agent runs the emergency protocol
        if a.stop_requested_at is None:
            d.out.append(
                RequestStop(d.job.job_id, a.instance_id, f"group stop: {why}", deadline_s=deadline)
            )
        elif d.now > max(deadline, a.stop_requested_at) + grace:
            d.end(a, EndReason.SUPERSEDED, f"still up {grace:.0f} s after its group stop", True)


def _launch(
    d: JobContext,
    generation: int,
    previous: Sequence[AttemptView],
    forced_on_demand: bool,
    why: str = "",
) -> None:
    job = d.job
    options = d.placement.options(forced_on_demand)
    shape = choose_shape(d.spec, options.choice.candidates, _target(d, job))
    ran = _ran_before(job)
    if shape is None:
        reason = (
            options.choice.reason
            if not options.choice.candidates
            else (f"no usable candidate has the group's shape ({_shape_text(d, job)})")
        )
        d.out.append(Waiting(job.job_id, 0, reason))
        d.move(JobState.RECOVERING if ran else JobState.PENDING, reason)
        return
    lead = f"relaunch after {why}; " if why else ""
    text = (
        f"{lead}generation {generation}: {shape.nnodes} node(s) × {shape.nproc_per_node} "
        f"on {shape.candidate.market_id.slug}; {options.choice.reason}"
    )
    for node in range(shape.nnodes):
        d.out.append(
            Launch(
                job.job_id,
                node,
                (shape.candidate,),
                d.next_token(),
                text,
                generation=generation,
                group_nnodes=shape.nnodes,
            )
        )
    d.move(JobState.RECOVERING if ran else JobState.PROVISIONING, text)


@dataclass(frozen=True)
class Target:
    """The shape a group aims for: ``nnodes`` nodes of ``nproc_per_node`` (None: not known yet)."""

    nnodes: int
    nproc_per_node: int | None

    def world_size(self, nproc: int) -> int:
        return self.nnodes * (self.nproc_per_node or nproc)


def _target(d: JobContext, job: JobView) -> Target:
    """``num_nodes`` of the first generation's GPUs per node (unknown before it launched)."""
    first = members_of(job, 0)
    gpus = _gpus_of(d.snapshot(), first[0].provider, first[0].instance_type) if first else None
    return Target(d.spec.num_nodes, gpus)


def _gpus_of(snapshot: Snapshot, provider: str, instance_type: str) -> int | None:
    """An instance type's GPUs (the same in every zone of its provider); None if not in the catalog."""
    for o in snapshot.market.offerings:
        if o.provider == provider and o.instance_type == instance_type:
            return max(1, o.gpu_count)
    return None


def _shape_text(d: JobContext, job: JobView) -> str:
    t = _target(d, job)
    return f"{t.nnodes} node(s) × {t.nproc_per_node or '?'} GPU(s)"


def choose_shape(spec: JobSpec, candidates: Sequence[Candidate], target: Target) -> Shape | None:
    """The next generation's shape from the usable ``candidates`` (best first).

    Not re-formable: ``target.nnodes`` on the best candidate with the target's GPUs per
    node (any, before the first generation). Re-formable: for each candidate the node
    count within ``spec.node_bounds`` whose world size is closest to the target's, and of
    those the closest overall, the better-ranked on a tie.
    """
    if not candidates:
        return None
    if not spec.reformable:
        for c in candidates:
            if target.nproc_per_node is None or c.offering.gpu_count == target.nproc_per_node:
                return Shape(c, target.nnodes)
        return None
    low, high = spec.node_bounds
    best: tuple[tuple[int, int, int], Shape] | None = None
    for index, c in enumerate(candidates):
        nproc = max(1, c.offering.gpu_count)
        want = target.world_size(nproc)
        nnodes = min(high, max(low, round(want / nproc)))
        # Closest world size; then the shape tried first (num_nodes); then the ranking.
        key = (abs(nnodes * nproc - want), 0 if nnodes == target.nnodes else 1, index)
        if best is None or key < best[0]:
            best = (key, Shape(c, nnodes))
    return None if best is None else best[1]
